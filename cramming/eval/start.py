"""What a GLUE run settles before it fine-tunes anything: the tasks, LoRA, the device, the precision, the baseline,
and what the encoder must allow (its positions, LoRA's target layers).

The same code runs at eval_glue.py's start, on the checkpoint, and at minute zero of `pretrain.py eval=glue`, on
the model `arch` will build: a setting the end of a 24-hour run would refuse is refused before it trains.
"""

import dataclasses
import json
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from cramming.engine.device import resolve_device
from cramming.engine.precision import Precision
from cramming.errors import CrammingError, Problems, problems_of, raise_problems
from cramming.eval.parameter_efficient import FULL_FINE_TUNING, LoraSettings, head_modules, lora_settings, lora_targets
from cramming.eval.tasks.base import Task
from cramming.eval.tasks.registry import GlueConfig, requested_tasks
from cramming.model import build_classifier
from cramming.model.config import as_model_config
from cramming.model.shapes import shapes_only

HEAD_PREFIX = "head."  # our classifier's fresh parameters (cramming.model.build_classifier)


@dataclasses.dataclass(frozen=True)
class GlueStart:
    """The settings of a GLUE run, resolved and checked."""

    tasks: list[Task]
    lora: Optional[LoraSettings]
    device: torch.device
    precision: Precision
    baseline: Optional[dict]


def glue_start(cfg: GlueConfig) -> GlueStart:
    """Every problem of `cfg` that needs no encoder, in one error: its values, the tasks, LoRA's settings, the
    device on this machine, the precision on it, and the baseline file."""
    problems = problems_of(cfg.check)  # its values; the tasks' names and settings are requested_tasks'
    tasks = _settle(problems, lambda: requested_tasks(cfg))
    lora = _settle(problems, lambda: lora_settings(cfg))
    device = _settle(problems, lambda: resolve_device(cfg.device, "eval.device"))
    precision = _settle(problems, lambda: Precision.resolve(cfg.precision, device or torch.device("cpu"),
                                                            "eval.precision"))
    baseline = _settle(problems, lambda: read_baseline(cfg.baseline))
    raise_problems(list(dict.fromkeys(problems)))
    return GlueStart(tasks, lora, device, precision, baseline)


def _settle(problems: list[str], make):
    """make()'s value; None, with its problems added to `problems`, where it refuses."""
    try:
        return make()
    except CrammingError as error:
        problems += error.problems if isinstance(error, Problems) else [str(error)]
        return None


def check_encoder_fits(cfg: GlueConfig, lora: Optional[LoraSettings], max_positions: int,
                       classifier: Optional[nn.Module], fresh: list[str], whose: str = "the checkpoint's") -> None:
    """eval.max_length within the encoder's positions, and LoRA's target layers among `classifier`'s Linear
    layers outside its fresh head (`fresh`: the parameters no checkpoint provides)."""
    problems = []
    if cfg.max_length > max_positions:
        problems.append(f"eval.max_length={cfg.max_length} exceeds {whose} {max_positions} positions")
    if lora is not None and classifier is not None:
        problems += problems_of(lambda: lora_targets(classifier, head_modules(fresh), lora.target_modules))
    raise_problems(problems)


def check_glue_after_pretraining(cfg: GlueConfig, arch, vocab_size: int) -> None:
    """pretrain.py eval=glue at minute zero: glue_start, and the checkpoint the run will write, built from `arch` on
    the meta device (shapes only), against eval.max_length and LoRA's targets: every problem."""
    problems = problems_of(lambda: glue_start(cfg))
    lora = _settle([], lambda: lora_settings(cfg))  # a problem of its settings is among glue_start's
    model_cfg = as_model_config(arch)
    classifier = None
    if lora is not None:
        with shapes_only():
            classifier = build_classifier(model_cfg, vocab_size, 2)
    fresh = [] if classifier is None else [name for name, _ in classifier.named_parameters()
                                           if name.startswith(HEAD_PREFIX)]
    problems += problems_of(lambda: check_encoder_fits(cfg, lora, model_cfg.max_position_embeddings, classifier,
                                                       fresh, "the final checkpoint's (arch.max_position_embeddings)"))
    raise_problems(problems)


def read_baseline(path: Optional[str]) -> Optional[dict]:
    """The scores of an earlier glue_results.json, to show beside this run's; read before any fine-tuning."""
    if path is None:
        return None
    try:
        earlier = json.loads(Path(path).expanduser().read_text())
        return {"checkpoint": earlier["checkpoint"], "protocol": earlier.get("protocol", FULL_FINE_TUNING),
                "scores": earlier["scores"],
                "glue_score": earlier["glue_score"], "glue_score_over": earlier["glue_score_over"]}
    except OSError as error:
        raise CrammingError(f"eval.baseline={path}: cannot read it ({error.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise CrammingError(f"eval.baseline={path}: not a glue_results.json written by eval_glue") from None
