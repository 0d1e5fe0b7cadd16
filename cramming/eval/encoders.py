"""Where GLUE's pretrained encoders come from: our checkpoints, or any transformers model
(`ckpt=hf:<hub id or local folder>`), behind one interface so that both run the same protocol.

A task's fresh head is drawn from the fine-tuning seed right before training, module by module in model
order, with the model's own initialization: so our checkpoint and its export score the same.
"""

import dataclasses
import json
import logging
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from cramming import hub
from cramming.errors import CrammingError
from cramming.files import share_weights
from cramming.eval.config import HF_PREFIX
from cramming.eval.parameter_efficient import LoraSettings
from cramming.library_noise import without_load_report
from cramming.model.checkpoint import build_classifier_from_pretrained, read_config, save_pretrained
from cramming.model.initialization import init_module

log = logging.getLogger(__name__)
# The names transformers configs give dropout; eval.dropout sets each one a config has (BERT: hidden and
# attention; classifier_dropout=None would fall back to hidden, set too; ModernBERT: embeddings, attention,
# MLP and classifier; ours: `dropout` covers all).
DROPOUT_KEYS = ("dropout", "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout",
                "embedding_dropout", "attention_dropout", "mlp_dropout")


def initialize_fresh(model: nn.Module, fresh: Iterable[str], init: Callable[[nn.Module], None], seed: int) -> None:
    """Draw the parameters named in `fresh` (those no checkpoint provided) from `seed`: `init` on each module
    owning one, in model order."""
    fresh = set(fresh)
    torch.manual_seed(seed)
    for name, module in model.named_modules():
        owned = (f"{name}.{key}" if name else key for key, _ in module.named_parameters(recurse=False))
        if any(key in fresh for key in owned):
            init(module)


@dataclasses.dataclass
class PretrainedEncoder:
    """One source of encoders for every task and seed."""

    description: str  # what the results name as the checkpoint
    tokenizer: PreTrainedTokenizerBase
    max_positions: int
    provenance: dict | None  # what pretrained it, where known
    load: Callable[[int, float], tuple[nn.Module, list[str], Callable[[nn.Module], None]]]
    save: Callable[[nn.Module, Path], None]  # a fine-tuned classifier, as a transformers folder

    def classifier(self, num_labels: int, dropout: float, seed: int,
                   lora: LoraSettings | None = None) -> nn.Module:
        """The encoder with a fresh classification head drawn from `seed`; `dropout` throughout. With `lora`,
        the pretrained weights are frozen and LoRA (its A drawn from the same seed's stream) trains with the
        head (eval.peft=lora)."""
        model, fresh, init = self.load(num_labels, dropout)
        initialize_fresh(model, fresh, init, seed)
        return model if lora is None else lora.apply(model, fresh)


def open_encoder(reference: str, dropout: float) -> PretrainedEncoder:
    """`hf:<id or folder>` through transformers' Auto classes; anything else is our checkpoint directory."""
    if reference.startswith(HF_PREFIX):
        return _transformers_encoder(reference.removeprefix(HF_PREFIX), dropout)
    return _cramming_encoder(reference, dropout)


def _cramming_encoder(directory: str, dropout: float) -> PretrainedEncoder:
    def load(num_labels, dropout):
        model, _ = build_classifier_from_pretrained(directory, num_labels, dropout=dropout)
        fresh = [name for name, _ in model.named_parameters() if name.startswith("head.")]
        return model, fresh, lambda module: init_module(module, model.config)

    probe, tokenizer = build_classifier_from_pretrained(directory, num_labels=2, dropout=dropout)  # fails fast
    # Our models have no segment embeddings: pairs are told apart by [SEP] alone.
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    def save(model, folder):
        from cramming.model.export import export_to_transformers  # noqa: PLC0415 -- model classes: seconds

        with tempfile.TemporaryDirectory() as checkpoint:
            save_pretrained(model, checkpoint, tokenizer)
            export_to_transformers(checkpoint, folder)

    return PretrainedEncoder(directory, tokenizer, probe.config.max_position_embeddings,
                             read_config(directory)[0].get("provenance"), load, save)


def _transformers_encoder(reference: str, dropout: float) -> PretrainedEncoder:
    from transformers import (  # noqa: PLC0415 -- a second to import, for hf: references only
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    key = check_transformers_reference(reference)

    def classifier(num_labels, dropout):
        config = attempt(key, AutoConfig.from_pretrained, reference, trust_remote_code=True)
        config.num_labels = num_labels  # (not as a keyword: a saved head's id2label of another size warns)
        config.problem_type = "regression" if num_labels == 1 else "single_label_classification"
        for name in DROPOUT_KEYS:
            if hasattr(config, name):
                setattr(config, name, dropout)
        with without_load_report():  # the head is reported in one line, by load() below
            return attempt(key, AutoModelForSequenceClassification.from_pretrained, reference, config=config,
                            trust_remote_code=True, output_loading_info=True, ignore_mismatched_sizes=True)

    reported = set()

    def load(num_labels, dropout):
        """A head of another size than the checkpoint's (an MNLI classifier on RTE) is drawn fresh, like a
        missing one."""
        model, info = classifier(num_labels, dropout)
        resized = [name for name, *_ in info["mismatched_keys"]]
        if num_labels not in reported:
            reported.add(num_labels)
            _report_head(key, saved_config.num_labels, num_labels, resized, info)
        return model, [*info["missing_keys"], *resized], model._init_weights

    tokenizer = attempt(key, AutoTokenizer.from_pretrained, reference, trust_remote_code=True)
    saved_config = attempt(key, AutoConfig.from_pretrained, reference, trust_remote_code=True)
    positions = getattr(saved_config, "max_position_embeddings", None) or tokenizer.model_max_length
    classifier(2, dropout)  # fails fast, before any data is read
    def save(model, folder):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        share_weights(Path(folder))

    return PretrainedEncoder(f"{HF_PREFIX}{reference}", tokenizer, positions, None, load, save)


def _report_head(key: str, saved_labels: int, num_labels: int, resized: list[str], info: dict) -> None:
    """One line instead of transformers' loading report: which weights are new, resized or left unused."""
    labels = f"{num_labels} label{'s' if num_labels > 1 else ''}"
    parts = []
    if resized:
        head = ", ".join(sorted(resized))
        parts.append(f"the checkpoint's {saved_labels}-label head re-initialised for {labels}: {head}")
    if info["missing_keys"]:
        parts.append(f"new for {labels}: {', '.join(sorted(info['missing_keys']))}")
    if info["unexpected_keys"]:
        unused = sorted(info["unexpected_keys"])
        more = ", ..." if len(unused) > 3 else ""
        parts.append(f"{len(unused)} checkpoint weight(s) unused ({', '.join(unused[:3])}{more})")
    if parts:
        log.info("%s: %s", key, "; ".join(parts))


def check_transformers_reference(reference: str) -> str:
    """The `ckpt=hf:<reference>` key errors name, once the reference is known not to be empty, a missing folder
    or one of our own checkpoints (every command that takes hf: alike)."""
    key = f"ckpt={HF_PREFIX}{reference}"
    if not reference:
        raise CrammingError(f"{key}: name a hub model (e.g. hf:bert-base-uncased) or a local transformers folder")
    folder = Path(reference).expanduser()
    if reference.startswith(("/", ".", "~")) and not folder.is_dir():
        raise CrammingError(f"{key}: no such folder")
    if _is_our_checkpoint(folder):
        raise CrammingError(f"{key}: this is one of our checkpoints; score it with ckpt={reference} (without hf:)")
    hub.offline_for(reference)  # a hub id: whether the hub answers, asked once before the loads
    return key


def _is_our_checkpoint(folder: Path) -> bool:
    try:
        return json.loads((folder / "config.json").read_text()).get("format") == "cramming"
    except (OSError, ValueError, AttributeError):  # no such file, not JSON, not an object: not ours
        return False


def attempt(key: str, load: Callable, reference: str, *args, **kwargs):
    """transformers' loaders raise OSError, ValueError or hub errors for a missing, unreachable or unknown
    model: one line naming the reference, and why the hub is out of reach where it is."""
    try:
        return load(reference, *args, **kwargs)
    except (OSError, ValueError, KeyError) as error:
        reason = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
        raise CrammingError(f"{key}: cannot load it ({reason}{hub.out_of_reach(hub.offline_for(reference))})") from None
