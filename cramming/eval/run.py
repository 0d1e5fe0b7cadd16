"""The GLUE stage: fine-tune a fresh copy of a pretrained encoder on each task, score it, write the report."""

import dataclasses
import json
import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from cramming.errors import CrammingError
from cramming.eval import multiple_choice
from cramming.eval.batching import encode_split, subset
from cramming.eval.config import GlueConfig, as_glue_config, protocol_deviations
from cramming.eval.data import TASKS, GlueDataMissing, GlueTask, GlueTaskData, get_task, load_task
from cramming.eval.encoders import PretrainedEncoder, open_encoder
from cramming.eval.finetune import finetune
from cramming.eval.multiple_choice import ChoiceTask, MultipleChoice
from cramming.eval.parameter_efficient import (
    FULL_FINE_TUNING, LoraSettings, lora_settings, merged, parameter_counts, record)
from cramming.eval.submission import write_test_predictions, zip_submission
from cramming.eval.metrics import PROTOCOL_NUMBERS, glue_average
from cramming.eval.report import write_reports
from cramming.provenance import provenance
from cramming.runtime import Precision, prepare_device, resolve_device

log = logging.getLogger(__name__)


def run_glue(eval_cfg: Any, checkpoint: str | Path, output_dir: str | Path) -> dict:
    """Run every task of `eval_cfg.tasks` that has data on the encoder of `checkpoint` (our checkpoint
    directory, or `hf:<hub id or transformers folder>`); write glue_results.{json,md} to output_dir.

    Tasks whose data is missing are reported as missing and the others still run.
    Returns the results as written to glue_results.json.
    """
    started = time.perf_counter()
    cfg = as_glue_config(eval_cfg)
    tasks = _check(cfg)
    lora = lora_settings(cfg)
    device = resolve_device(cfg.device, "eval.device")
    precision = Precision.resolve(cfg.precision, device, "eval.precision")
    prepare_device(device)
    baseline = _read_baseline(cfg.baseline)
    encoder = open_encoder(str(checkpoint), cfg.dropout)
    if cfg.max_length > encoder.max_positions:
        raise CrammingError(f"eval.max_length={cfg.max_length} exceeds the checkpoint's {encoder.max_positions} positions")
    peft = record(lora, encoder.classifier(2, cfg.dropout, 0, lora) if lora else None)  # bad targets fail now
    if lora is not None:
        log.info("parameter-efficient protocol: %s (%s); not comparable with full fine-tuning",
                 lora.describe(), ", ".join(peft["adapted_layers"]))
    data, task_results = _load_data(tasks, cfg)

    for name, task_data in data.items():
        sizes = ", ".join(f"{split} ({len(examples)})" for split, examples in task_data.evaluations.items())
        capped = cfg.max_train_examples is not None and cfg.max_train_examples < len(task_data.train)
        using = f" (using {cfg.max_train_examples}: eval.max_train_examples)" if capped else ""
        log.info("%s: %d train examples%s, evaluation on %s", name, len(task_data.train), using, sizes)
        task_results[name] = _run_task(task_data, encoder, cfg, lora, device, precision, Path(output_dir))
    task_results = {task.name: task_results[task.name] for task in tasks}  # in the requested order

    ran = [result for result in task_results.values() if result["status"] == "ran"]
    scores = {split: split_scores for result in ran for split, split_scores in result["scores"].items()}
    average, averaged = glue_average(scores)
    results = {
        "checkpoint": encoder.description,
        "protocol": FULL_FINE_TUNING if lora is None else lora.label,  # rows of other protocols never mix
        "peft": peft,
        "scores_unit": "percent",
        "glue_score": average,
        "glue_score_over": averaged,
        "glue_score_missing": [split for split, _ in PROTOCOL_NUMBERS if split not in averaged],
        "scores": scores,
        "baseline": baseline,
        "tasks": task_results,
        "hyperparameters": dataclasses.asdict(cfg),
        "protocol_deviations": protocol_deviations(cfg),
        "runtime": {
            "device": str(device),
            "precision": precision.name,
            "torch": torch.__version__,
        },
        "provenance": provenance(device),  # what ran the fine-tuning
        "checkpoint_provenance": encoder.provenance,  # what pretrained it, where known
        "wall_seconds": time.perf_counter() - started,
    }
    if cfg.predict_test:
        results["submission"] = zip_submission(Path(output_dir))
    write_reports(results, Path(output_dir))
    shown = "n/a" if average is None else f"{average:.2f}"
    for split, metric in multiple_choice.MAIN_METRIC.items():  # beyond GLUE: never in its average
        if split in scores:
            log.info("%s %s %.2f (not in the GLUE score)", split.upper(), metric, scores[split][metric])
    over = ", ".join(averaged) or "no GLUE task"
    log.info("GLUE score %s over %s; wrote %s/glue_results.{json,md}", shown, over, output_dir)
    return results


def _check(cfg: GlueConfig) -> list[GlueTask | ChoiceTask]:
    """The requested tasks; settings that would fail late or mean nothing are errors now."""
    if not cfg.tasks:
        raise CrammingError("eval.tasks is empty")
    if len(set(cfg.tasks)) != len(cfg.tasks):
        raise CrammingError(f"eval.tasks lists a task twice: {cfg.tasks}")
    if not cfg.seeds:
        raise CrammingError("eval.seeds is empty; give at least one seed")
    if len(cfg.betas) != 2 or not all(0 <= beta < 1 for beta in cfg.betas):
        raise CrammingError(f"eval.betas={list(cfg.betas)} must be two numbers in [0, 1)")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise CrammingError(f"eval.lr={cfg.lr} must be positive and finite")
    if not cfg.eps > 0 or cfg.weight_decay < 0:
        raise CrammingError(f"eval.eps={cfg.eps} must be positive and eval.weight_decay={cfg.weight_decay} not negative")
    if not 0 <= cfg.dropout < 1:
        raise CrammingError(f"eval.dropout={cfg.dropout} must be in [0, 1)")
    for key in ("batch_size", "eval_batch_size", "epochs", "max_length"):
        if getattr(cfg, key) < 1:
            raise CrammingError(f"eval.{key} must be at least 1, got {getattr(cfg, key)}")
    cap = cfg.max_train_examples
    if cap is not None and cap < 1:
        raise CrammingError(f"eval.max_train_examples must be null or at least 1, got {cap}")
    if not 0 <= cfg.warmup_fraction <= 1:
        raise CrammingError(f"eval.warmup_fraction must be in [0, 1], got {cfg.warmup_fraction}")
    unknown = [name for name in cfg.tasks if name not in TASKS and name not in multiple_choice.TASKS]
    if unknown:
        known = ", ".join([*TASKS, *multiple_choice.TASKS])
        raise CrammingError(f"unknown GLUE task '{unknown[0]}'; known tasks: {known}")
    return [multiple_choice.TASKS.get(name) or get_task(name) for name in cfg.tasks]


def _spread(values: list[float]) -> dict[str, float]:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"min": min(values), "max": max(values), "stdev": deviation}


def _read_baseline(path: str | None) -> dict | None:
    """The scores of an earlier glue_results.json, to show beside this run's; read before any fine-tuning."""
    if path is None:
        return None
    try:
        earlier = json.loads(Path(path).read_text())
        return {"checkpoint": earlier["checkpoint"], "protocol": earlier.get("protocol", FULL_FINE_TUNING),
                "scores": earlier["scores"],
                "glue_score": earlier["glue_score"], "glue_score_over": earlier["glue_score_over"]}
    except OSError as error:
        raise CrammingError(f"eval.baseline={path}: cannot read it ({error.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise CrammingError(f"eval.baseline={path}: not a glue_results.json written by eval_glue") from None


def _load_data(
    tasks: list[GlueTask | ChoiceTask], cfg: GlueConfig
) -> tuple[dict[str, GlueTaskData], dict[str, dict]]:
    """Every task's data up front, so a malformed file stops the run before hours of fine-tuning."""
    data, missing = {}, {}
    for task in tasks:
        try:
            load = multiple_choice.load_task if isinstance(task, ChoiceTask) else load_task
            data[task.name] = load(task, cfg.data_dir, cfg.max_malformed_fraction)
        except GlueDataMissing as reason:
            log.warning("%s: missing, skipped (%s)", task.name, reason)
            missing[task.name] = {"status": "missing", "reason": str(reason)}
    if not data:
        reasons = "; ".join(result["reason"] for result in missing.values())
        raise CrammingError(f"no data for any requested GLUE task ({reasons})")
    return data, missing


def _run_task(
    task_data: GlueTaskData,
    encoder: PretrainedEncoder,
    cfg: GlueConfig,
    lora: LoraSettings | None,
    device: torch.device,
    precision: Precision,
    output_dir: Path,
) -> dict:
    """Every seed of one task; the reported score of each metric is the median of the seeds' last epochs,
    with their spread (min, max, standard deviation) when there are several."""
    started = time.perf_counter()
    task = task_data.task
    choices = isinstance(task, ChoiceTask)  # multiple choice (SWAG): one output per choice, softmax over them
    tokenizer = encoder.tokenizer

    def encode(split):
        if choices:
            return multiple_choice.encode_split(split, tokenizer, cfg.max_length)
        return encode_split(split, tokenizer, cfg.max_length, regression=task.num_labels == 1)

    train = encode(task_data.train)
    if cfg.max_train_examples is not None:
        train = subset(train, cfg.max_train_examples)
    evaluations = {name: encode(split) for name, split in task_data.evaluations.items()}

    histories, predictions, parameters = {}, None, None
    for seed in cfg.seeds:
        # the head and dropout (and LoRA's A) from the seed
        classifier = encoder.classifier(task.num_labels, cfg.dropout, seed, lora)
        if choices:
            classifier = MultipleChoice(classifier)
        if parameters is None:
            parameters = parameter_counts(classifier)
            trainable, total = parameters["trainable"], parameters["total"]
            log.info("%s: %s trains %s of %s parameters (%.2f%%)", task.name,
                     FULL_FINE_TUNING if lora is None else lora.label, f"{trainable:,}", f"{total:,}",
                     100 * trainable / total)
        describe = f"{task.name} seed {seed}"
        pad_id = tokenizer.pad_token_id
        histories[seed] = finetune(classifier, train, evaluations, cfg, device, precision, seed, pad_id, describe)
        if cfg.predict_test and seed == cfg.seeds[0] and not choices:  # GLUE-server files: GLUE tasks only
            predictions = write_test_predictions(task, classifier, tokenizer, cfg, device, precision,
                                                 output_dir / "submission")
        if cfg.save_models:
            plain = classifier.scorer if choices else classifier  # SWAG: the one-output pair scorer
            plain = plain if lora is None else merged(plain)  # LoRA folded into the weights
            encoder.save(plain.cpu(), output_dir / "models" / f"{task.name}-seed{seed}")
    finals = [history[-1]["scores"] for history in histories.values()]
    scores = {
        split: {metric: statistics.median(final[split][metric] for final in finals) for metric in metrics}
        for split, metrics in finals[0].items()
    }
    spread = {
        split: {metric: _spread([final[split][metric] for final in finals]) for metric in metrics}
        for split, metrics in finals[0].items()
    }
    every_split = [task_data.train, *task_data.evaluations.values()]
    return {
        "status": "ran",
        "scores": scores,
        "spread": spread,
        "test_predictions": predictions,
        "seeds": {str(seed): history for seed, history in histories.items()},
        "parameters": parameters,  # trainable and total (and LoRA's) in each seed's classifier
        "train_examples": len(train),
        "train_examples_available": len(task_data.train),
        "eval_examples": {name: len(split) for name, split in evaluations.items()},
        "missing_evaluations": task_data.missing_evaluations,
        "skipped_malformed_rows": {s.source: s.skipped_rows for s in every_split if s.skipped_rows},
        "wall_seconds": time.perf_counter() - started,
    }
