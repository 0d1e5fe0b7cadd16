"""The GLUE stage: fine-tune a fresh copy of a pretrained encoder on each task, score it, write the report; and
a kept classifier's export scored on its task's dev split the same way (export.py's quantize_eval_task)."""

import dataclasses
import logging
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cramming.engine.device import prepare_device
from cramming.engine.precision import Precision
from cramming.errors import CrammingError
from cramming.eval.batching import chosen_rows
from cramming.eval.compiled import compiles
from cramming.eval.config import protocol_deviations
from cramming.eval.encoders import PretrainedEncoder, open_encoder
from cramming.eval.finetune import evaluate, finetune
from cramming.eval.parameter_efficient import FULL_FINE_TUNING, LoraSettings, parameter_counts, record
from cramming.eval.report import write_reports
from cramming.eval.start import check_encoder_fits, glue_start
from cramming.eval.submission import zip_submission
from cramming.eval.tasks.base import DataMissing, Task, TaskData, absent_text, take
from cramming.eval.tasks.glue import PROTOCOL_NUMBERS, glue_average
from cramming.eval.tasks.registry import TASK_NAMES, GlueConfig, as_glue_config, task_named
from cramming.eval.tasks.superglue import SCORE_METRICS, superglue_score
from cramming.provenance import provenance

log = logging.getLogger(__name__)


def run_glue(eval_cfg: Any, checkpoint: str | Path, output_dir: str | Path,
             on_start: Callable[[], None] = lambda: None) -> dict:
    """Run every task of `eval_cfg.tasks` that has data on the encoder of `checkpoint` (our checkpoint
    directory, or `hf:<hub id or transformers folder>`); write glue_results.{json,md} to output_dir.

    Tasks whose data is missing are reported as missing and the others still run. `on_start` is called once
    the checks have passed and the data is loaded: what fails after it is no failed start.
    Returns the results as written to glue_results.json.
    """
    started = time.perf_counter()
    cfg = as_glue_config(eval_cfg)
    start = glue_start(cfg)
    tasks, lora, device, precision = start.tasks, start.lora, start.device, start.precision
    prepare_device(device)
    encoder = open_encoder(str(checkpoint), cfg.dropout)
    check_encoder_fits(cfg, None, encoder.max_positions, None, [])
    peft = record(lora, encoder.classifier(2, cfg.dropout, 0, lora) if lora else None)  # bad targets fail now
    if lora is not None:
        log.info("parameter-efficient protocol: %s (%s); not comparable with full fine-tuning",
                 lora.describe(), ", ".join(peft["adapted_layers"]))
    data, task_results, _ = load_task_data(tasks, cfg)
    on_start()

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
    superglue, superglue_over = superglue_score(scores)  # apart from the GLUE score; RTE counts in both
    beyond = {split: task.metric for task in tasks if not task.in_glue  # reported beside the GLUE score
              for split in task_results[task.name].get("scores", {})}
    results = {
        "checkpoint": encoder.description,
        "protocol": FULL_FINE_TUNING if lora is None else lora.label,  # rows of other protocols never mix
        "peft": peft,
        "scores_unit": "percent",
        "glue_score": average,
        "glue_score_over": averaged,
        "glue_score_missing": [split for split, _ in PROTOCOL_NUMBERS if split not in averaged],
        "beyond_glue": beyond,  # {split: its main metric} of the tasks outside GLUE
        "superglue_score": superglue,
        "superglue_score_over": superglue_over,
        "superglue_score_missing": [name for name in SCORE_METRICS if superglue_over and name not in superglue_over],
        "scores": scores,
        "baseline": start.baseline,
        "tasks": task_results,
        "hyperparameters": dataclasses.asdict(cfg),
        "protocol_deviations": protocol_deviations(cfg),
        "runtime": {
            "device": str(device),
            "precision": precision.name,
            "compiled": compiles(cfg.compile, device),  # eval.compile (cramming.eval.compiled)
            "torch": torch.__version__,
        },
        "provenance": provenance(device),  # what ran the fine-tuning
        "checkpoint_provenance": encoder.provenance,  # what pretrained it, where known
        "wall_seconds": time.perf_counter() - started,
    }
    if cfg.predict_test:
        # GLUE's archive always (a warning when no task wrote a file for it), and each other leaderboard's whose
        # tasks ran: results["submission"], results["superglue_submission"]
        for server in ["GLUE", *sorted({task.leaderboard for task in tasks} - {"GLUE", None})]:
            key = "submission" if server == "GLUE" else f"{server.lower()}_submission"
            results[key] = zip_submission(Path(output_dir), server)
    write_reports(results, Path(output_dir))
    shown = "n/a" if average is None else f"{average:.2f}"
    for split, metric in beyond.items():
        log.info("%s %s %.2f (not in the GLUE score)", split.upper(), metric, scores[split][metric])
    if superglue is not None:
        log.info("SuperGLUE score %.2f over %s (apart from the GLUE score)", superglue, ", ".join(superglue_over))
    over = ", ".join(averaged) or "no GLUE task"
    log.info("GLUE score %s over %s; wrote %s/glue_results.{json,md}", shown, over, output_dir)
    return results


def _spread(values: list[float]) -> dict[str, float]:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"min": min(values), "max": max(values), "stdev": deviation}


def load_task_data(tasks: list[Task], cfg: GlueConfig) -> tuple[dict[str, TaskData], dict[str, dict], dict[str, str]]:
    """Every task's data up front, so a malformed file stops the run before hours of fine-tuning. What was asked for
    and has no data (a task, an evaluation split, a test split eval.predict_test reads) is refused, unless
    eval.skip_missing=true: then it is said here and skipped. Returns the data, the missing tasks' results and
    {what was skipped: why}."""
    data, missing, absent = {}, {}, {}
    for task in tasks:
        try:
            data[task.name] = task.load(cfg.data_dir, cfg.max_malformed_fraction)
        except DataMissing as reason:
            missing[task.name] = {"status": "missing", "reason": str(reason)}
            absent[task.name] = reason.cause or str(reason)  # a shared cause (the hub out of reach) said once
    if not data:
        offline = "" if cfg.data_dir else "; eval.data_dir=<folder> reads the tasks' files instead (docs/glue.md)"
        raise CrammingError(f"no data for any requested task ({absent_text(absent)}){offline}")
    absent |= {split: why for task_data in data.values() for split, why in task_data.missing_evaluations.items()}
    if cfg.predict_test and cfg.data_dir is not None:
        absent |= {f"the submission's {file}": f"{path} not found" for task_data in data.values()
                   for file, path in task_data.task.test_files(cfg).items() if not path.is_file()}
    if absent and not cfg.skip_missing:
        them = "it" if len(absent) == 1 else "them"
        raise CrammingError(f"no data for {absent_text(absent)} — the run would leave {them} out: add the files, or "
                            "set eval.skip_missing=true to run the rest without them")
    if absent:
        log.warning("no data for %s: skipped", absent_text(absent))
    return data, missing, absent


def _run_task(
    task_data: TaskData,
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
    tokenizer = encoder.tokenizer
    examples = task_data.train
    if cfg.max_train_examples is not None:  # before encoding: a capped run tokenizes only what it trains on
        examples = take(examples, chosen_rows(len(examples), cfg.max_train_examples))
    train = task.encode(examples, tokenizer, cfg.max_length)
    evaluations = {name: task.encode(split, tokenizer, cfg.max_length) for name, split in task_data.evaluations.items()}

    histories, predictions, parameters = {}, None, None
    for seed in cfg.seeds:
        classifier = task.model(encoder, cfg.dropout, seed, lora)  # the head and dropout (and LoRA's A) from the seed
        if parameters is None:
            parameters = parameter_counts(classifier)
            trainable, total = parameters["trainable"], parameters["total"]
            log.info("%s: %s trains %s of %s parameters (%.2f%%)", task.name,
                     FULL_FINE_TUNING if lora is None else lora.label, f"{trainable:,}", f"{total:,}",
                     100 * trainable / total)
        describe = f"{task.name} seed {seed}"
        pad_id = tokenizer.pad_token_id
        histories[seed] = finetune(classifier, train, evaluations, cfg, device, precision, seed, pad_id, describe,
                                   task.score)
        if cfg.predict_test and seed == cfg.seeds[0]:  # server files, for a task a server scores
            predictions = task.write_submission(classifier, tokenizer, cfg, device, precision,
                                                output_dir / "submission")
        if cfg.save_models:
            task.save(classifier, encoder, output_dir / "models" / f"{task.name}-seed{seed}")
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


def glue_dev_scores(folder: Path, task_name: str, glue_dir: str | None) -> dict:
    """A fine-tuned model's export (fp32, or its int8 copy: model/quantize.py) scored on the task's dev split(s),
    on the CPU, with the GLUE protocol's tokenization; the task loads, encodes and scores as in eval_glue.py."""
    from transformers import AutoTokenizer  # noqa: PLC0415 -- Auto classes (a second), for export's check only

    if task_name not in TASK_NAMES:
        raise CrammingError(f"quantize_eval_task={task_name!r} is not a GLUE task; choose one of "
                            f"{', '.join(TASK_NAMES)}")
    protocol = GlueConfig(tasks=[task_name], data_dir=glue_dir)
    try:
        task_class = task_named(task_name)
        task_class.check(protocol)
        task = task_class.build(protocol)
    except CrammingError as error:  # settings of its own (eval.local.*) that the export command does not take
        raise CrammingError(f"quantize_eval_task={task_name}: {error}") from None
    model = task.saved_model(folder)
    if model is None:
        raise CrammingError(f"quantize_eval_task={task_name}: {folder} is not a classifier fine-tuned on it "
                            f"({task.head}); quantize one kept by eval_glue.py eval.save_models=true")
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    try:
        data = task.load(glue_dir, protocol.max_malformed_fraction)
    except DataMissing as reason:
        raise CrammingError(f"quantize_eval_task={task_name}: no data to score it on ({reason})") from None
    cpu, fp32 = torch.device("cpu"), Precision("fp32", "cpu")
    scores = {}
    for name, split in data.evaluations.items():
        encoded = task.encode(split, tokenizer, protocol.max_length)
        scores[name] = evaluate(model, encoded, name, task.score, protocol.eval_batch_size, cpu, fp32,
                                tokenizer.pad_token_id)
    return scores
