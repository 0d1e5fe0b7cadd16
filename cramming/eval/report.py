"""Write the GLUE results: glue_results.json (everything) and glue_results.md (the table people read)."""

import json
from pathlib import Path
from typing import Optional

from cramming.eval.metrics import format_scores
from cramming.eval.parameter_efficient import FULL_FINE_TUNING
from cramming.eval.tasks import superglue
from cramming.eval.tasks.glue import COLUMNS, METRICS_NOTE, PROTOCOL_NUMBERS, REFERENCE_ROWS
from cramming.files import write_atomically


def write_reports(results: dict, output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(output_dir / "glue_results.json", json.dumps(results, indent=2, allow_nan=False) + "\n")  # strict
    write_atomically(output_dir / "glue_results.md", markdown_report(results))


def markdown_report(results: dict) -> str:
    lines = ["# GLUE results", "", *_score_table(results), *_superglue_table(results), *_beyond_glue(results), "",
             *_deviations(results["protocol_deviations"])]
    lines += ["", "## Tasks", "", "| task | status | scores | train / eval examples | wall time |"]
    lines += ["|---|---|---|---|---|", *(_task_row(name, task) for name, task in results["tasks"].items())]
    notes = _data_notes(results["tasks"])
    if notes:
        lines += ["", "## Data notes", "", *notes]
    lines += ["", "## Per-epoch scores", ""]
    for name, task in results["tasks"].items():
        for seed, epochs in task.get("seeds", {}).items():
            for record in epochs:
                loss, scores = record["train_loss"], format_scores(record["scores"])
                lines.append(f"- {name} seed {seed} epoch {record['epoch']}: train loss {loss:.4f}; {scores}")
    lines += ["", f"Total wall time: {results['wall_seconds']:.1f} s", ""]
    return "\n".join(lines)


def _cell(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.1f}"


def _row(label: str, numbers: list[Optional[float]], average: str) -> str:
    """numbers: the nine protocol numbers in PROTOCOL_NUMBERS order (the first two share one column)."""
    cells = [f"{_cell(numbers[0])}/{_cell(numbers[1])}", *(_cell(n) for n in numbers[2:]), average]
    return f"| {label} | " + " | ".join(cells) + " |"


def _score_table(results: dict) -> list[str]:
    """The scores beside the published ones: one table per protocol (full fine-tuning, LoRA r=8, ...), so
    that rows of different protocols are never read as comparable."""
    scores, averaged = results["scores"], results["glue_score_over"]
    seeds = results["hyperparameters"]["seeds"]
    protocol = results.get("protocol", FULL_FINE_TUNING)  # results written before eval.peft: full
    ours = [scores[split][metric] if split in scores else None for split, metric in PROTOCOL_NUMBERS]
    partial = len(averaged) < len(PROTOCOL_NUMBERS)
    our_average = _cell(results["glue_score"]) + ("*" if partial and averaged else "")
    label = "**this checkpoint**" if protocol == FULL_FINE_TUNING else f"**this checkpoint ({protocol})**"
    tables = {protocol: [_row(label, ours, our_average)]}  # this run's protocol first
    baseline = results.get("baseline")
    if baseline is not None:
        tables.setdefault(baseline.get("protocol", FULL_FINE_TUNING), []).append(_baseline_row(baseline))
    tables.setdefault(FULL_FINE_TUNING, []).extend(
        _row(reference, list(row[:-1]), _cell(row[-1])) for reference, row in REFERENCE_ROWS.items())
    lines = [
        f"Checkpoint: `{results['checkpoint']}`  ",
        f"GLUE dev sets, scores in percent from the last epoch, median over {len(seeds)} seed(s) {seeds}; "
        f"device {results['runtime']['device']}, precision {results['runtime']['precision']}.",
    ]
    for name, rows in tables.items():
        if len(tables) > 1:
            lines += ["", f"**Protocol: {name}**"]
            if name == protocol:
                lines += _peft_summary(results)
        lines += ["", "| model | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|", *rows]
    lines += ["", METRICS_NOTE]
    if len(tables) > 1:
        lines.append("Each protocol has its own table: scores and averages do not compare across tables.")
    if partial:
        lines.append(
            f"\\* Average over the {len(averaged)} of {len(PROTOCOL_NUMBERS)} protocol numbers that ran "
            f"({', '.join(averaged) or 'none'}); the reference averages are over all nine and do not compare."
        )
    return lines


def _superglue_table(results: dict) -> list[str]:
    """SuperGLUE's tasks as its leaderboard shows them (two numbers where it has two metrics), its score over
    the eight tasks that ran, and the diagnostics; apart from the GLUE score."""
    scores, counted = results["scores"], results.get("superglue_score") is not None
    shown = [name for name in superglue.COLUMNS if name in scores and (name != "rte" or counted)]  # GLUE's RTE
    if not counted and not any(name in scores for name in superglue.DIAGNOSTIC_METRICS):
        return []
    metric_sets = superglue.SCORE_METRICS | superglue.DIAGNOSTIC_METRICS
    headers = [f"{superglue.COLUMNS[name]} ({'/'.join(metric_sets[name])})" for name in shown]
    cells = ["/".join(_cell(scores[name][metric]) for metric in metric_sets[name]) for name in shown]
    over = results.get("superglue_score_over") or []
    score = _cell(results.get("superglue_score")) + ("*" if 0 < len(over) < len(superglue.SCORE_METRICS) else "")
    lines = ["", "## SuperGLUE", "",
             "Validation sets (AX-b, AX-g: their one labelled file, scored by the RTE model each trains), under this "
             "run's protocol; the score is not part of the GLUE average.", "",
             "| model | " + " | ".join([*headers, "SuperGLUE score"]) + " |", "|---" * (len(shown) + 2) + "|",
             f"| **this checkpoint** | {' | '.join([*cells, score])} |", "",
             "The SuperGLUE score is the mean over BoolQ, CB, COPA, MultiRC, ReCoRD, RTE, WiC and WSC of each task's "
             "score, the mean of its metrics where it has two; AX-b and AX-g are diagnostics outside it."]
    if score.endswith("*"):
        lines.append(f"\\* Over the {len(over)} of {len(superglue.SCORE_METRICS)} tasks that ran ({', '.join(over)}).")
    return lines


def _beyond_glue(results: dict) -> list[str]:
    """Tasks outside GLUE (and SuperGLUE, which has a table of its own) in a table of their own, under the same
    protocol: never in the average."""
    ran = [(split, metric) for split, metric in results["beyond_glue"].items() if split not in superglue.COLUMNS]
    if not ran:
        return []
    header = " | ".join(f"{split.upper()} ({metric}, validation)" for split, metric in ran)
    cells = " | ".join(_cell(results["scores"][split][metric]) for split, metric in ran)
    protocol = results.get("protocol", FULL_FINE_TUNING)
    label = "**this checkpoint**" if protocol == FULL_FINE_TUNING else f"**this checkpoint ({protocol})**"
    return ["", "## Beyond GLUE", "", "Fine-tuned under this run's protocol; not part of the GLUE average.", "",
            f"| model | {header} |", "|---" * (len(ran) + 1) + "|", f"| {label} | {cells} |"]


def _baseline_row(baseline: dict) -> str:
    """The earlier run of `eval.baseline`, in the same columns; named with its protocol unless full."""
    scores = baseline["scores"]
    numbers = [scores[split][metric] if split in scores else None for split, metric in PROTOCOL_NUMBERS]
    partial = len(baseline["glue_score_over"]) < len(PROTOCOL_NUMBERS)
    average = _cell(baseline["glue_score"]) + ("*" if partial and baseline["glue_score_over"] else "")
    protocol = baseline.get("protocol", FULL_FINE_TUNING)
    suffix = "" if protocol == FULL_FINE_TUNING else f" ({protocol})"
    return _row(f"baseline: `{baseline['checkpoint']}`{suffix}", numbers, average)


def _peft_summary(results: dict) -> list[str]:
    """What a parameter-efficient run trained: its method, where, and how many parameters, task by task."""
    peft = results.get("peft")
    if peft is None:
        return []
    counts = [f"{name} {task['parameters']['trainable']:,} of {task['parameters']['total']:,} "
              f"({100 * task['parameters']['trainable'] / task['parameters']['total']:.2f}%)"
              for name, task in results["tasks"].items() if task.get("parameters")]
    layers = ", ".join(peft.get("adapted_layers") or peft["target_modules"] or ["every Linear layer"])
    return [
        "",
        f"Parameter-efficient fine-tuning ({peft['reference']}): the pretrained weights are frozen; rank-"
        f"{peft['rank']} updates scaled by alpha / r = {peft['alpha']:g} / {peft['rank']} on {layers} (dropout "
        f"{peft['dropout']:g}) train with the classification head. Trainable parameters: "
        + ("; ".join(counts) or "n/a") + ". Not comparable with full fine-tuning (the reference rows).",
    ]


def _deviations(deviations: dict) -> list[str]:
    lines = ["## Protocol deviations", ""]
    if not deviations:
        return lines + ["None: the fixed GLUE hyperparameters of the protocol."]
    lines += [f"- `{name}`: {d['used']} (protocol: {d['protocol']})" for name, d in deviations.items()]
    return lines + ["", "These scores are **not** comparable with the reference rows."]


def _task_row(name: str, task: dict) -> str:
    if task["status"] != "ran":
        return f"| {name} | missing: {task['reason']} | | | |"
    examples = f"{task['train_examples']} / " + ", ".join(str(n) for n in task["eval_examples"].values())
    scores = format_scores(task["scores"], digits=1)
    if len(task["seeds"]) > 1:
        ranges = [f"{metric} {r['min']:.1f}–{r['max']:.1f} (sd {r['stdev']:.1f})"
                  for split in task["spread"].values() for metric, r in split.items()]
        scores += f"; over {len(task['seeds'])} seeds: " + ", ".join(ranges)
    return f"| {name} | ran | {scores} | {examples} | {task['wall_seconds']:.1f} s |"


def _data_notes(tasks: dict) -> list[str]:
    """Missing evaluation splits, skipped malformed rows and capped training sets, task by task."""
    notes = []
    for name, task in tasks.items():
        if task["status"] != "ran":
            continue
        for split, reason in task["missing_evaluations"].items():
            notes.append(f"- {name}: evaluation split {split} missing ({reason})")
        for source, rows in task["skipped_malformed_rows"].items():
            notes.append(f"- {name}: skipped {len(rows)} malformed rows of {source} (lines {rows[:10]})")
        used, available = task["train_examples"], task["train_examples_available"]
        if used != available:
            notes.append(f"- {name}: trained on {used} of {available} examples (eval.max_train_examples)")
    return notes
