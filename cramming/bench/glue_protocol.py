"""How long the whole GLUE protocol takes on this machine, projected from a short measured slice of each task.

    python scripts/bench_glue_protocol.py --glue-dir <GLUE folder> [--ckpt <checkpoint>] [--steps 20]
        [--tasks cola,sst2,...] [--repeats 3] [--dropout 0.1] [--compile auto|true|false] [--device auto]
        [--layers 2 --hidden 128 --heads 4 --intermediate 512]

Each task fine-tunes `--steps` steps of 16 of its own examples for 1 + `--repeats` epochs and scores
2 x eval_batch_size dev examples after each: the first epoch compiles and warms up, the others are timed, and
their medians are reported. The projection is 5 epochs at the task's real size (GLUE's published train and dev
sizes) at the median pace, plus the first epoch's extra seconds once. A task not measured (its files missing
here, as QQP's, or MNLI's and QNLI's training files; or left out of --tasks) is projected at the mean pace of
the measured ones, and marked so.
Without --ckpt, a crammed-bert of the given shape with random weights (speed does not depend on skill).
"""

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from cramming.bench.glue_speed import make_checkpoint
from cramming.engine.device import prepare_device, resolve_device
from cramming.errors import CrammingError, exit_on_user_error
from cramming.eval.batching import subset
from cramming.eval.compiled import compiles
from cramming.eval.encoders import open_encoder
from cramming.eval.finetune import finetune
from cramming.eval.tasks.base import DataMissing
from cramming.eval.tasks.glue import classic_glue_dir
from cramming.eval.tasks.registry import GlueConfig, task_named
from cramming.engine.precision import Precision

# GLUE's published sizes (train, dev; MNLI's dev is matched + mismatched), which the projection runs at.
FULL_SIZES = {
    "cola": (8_551, 1_043), "sst2": (67_349, 872), "mrpc": (3_668, 408), "stsb": (5_749, 1_500),
    "qqp": (363_846, 40_430), "mnli": (392_702, 9_815 + 9_832), "qnli": (104_743, 5_463), "rte": (2_490, 277),
    "wnli": (635, 71),
}
COMPILE_CHOICES = {"auto": None, "true": True, "false": False}


def measure(name: str, encoder, cfg: GlueConfig, steps: int, device, precision) -> dict | None:
    """One task's slice: the median s/step and dev examples/s of the timed epochs (all but the first), and the
    first epoch's extra seconds over the median (compilation, warm-up). None when this machine lacks the task's
    files."""
    task = task_named(name)()
    try:
        data = task.load(cfg.data_dir, cfg.max_malformed_fraction)
    except DataMissing:
        return None
    dev = next(iter(data.evaluations.values()))
    train = subset(task.encode(data.train, encoder.tokenizer, cfg.max_length), steps * cfg.batch_size)
    evaluation = subset(task.encode(dev, encoder.tokenizer, cfg.max_length), 2 * cfg.eval_batch_size)
    classifier = task.model(encoder, cfg.dropout, 0)
    first, *timed = finetune(classifier, train, {"dev": evaluation}, cfg, device, precision, 0,
                             encoder.tokenizer.pad_token_id, name, task.score)
    return {"steps": first["steps"],
            "step_s": statistics.median(epoch["train_seconds"] / epoch["steps"] for epoch in timed),
            "eval_rate": statistics.median(len(evaluation) / (epoch["seconds"] - epoch["train_seconds"])
                                           for epoch in timed),
            "first_extra_s": max(0.0, first["seconds"] - statistics.median(epoch["seconds"] for epoch in timed))}


def projected(measured: dict, name: str, epochs: int, batch_size: int) -> float:
    """Seconds of the protocol's fine-tuning of one task at its real size, one seed."""
    train, dev = FULL_SIZES[name]
    steps = epochs * math.ceil(train / batch_size)
    return steps * measured["step_s"] + epochs * dev / measured["eval_rate"] + measured["first_extra_s"]


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path, help="a folder of the classic GLUE TSVs (<task>/train.tsv, dev.tsv)")
    parser.add_argument("--ckpt", help="a checkpoint directory to fine-tune (default: random weights)")
    parser.add_argument("--steps", type=int, default=20, help="training steps a task's timed epoch runs")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs after the first; medians reported")
    parser.add_argument("--dropout", type=float, default=GlueConfig().dropout,
                        help="eval.dropout (default: the protocol's)")
    parser.add_argument("--tasks", default=",".join(FULL_SIZES),
                        help="the tasks to measure, comma-separated (the others are projected at their pace)")
    parser.add_argument("--compile", choices=list(COMPILE_CHOICES), default="auto",
                        help="eval.compile: auto compiles on a GPU only")
    parser.add_argument("--device", default="auto", help="auto (the GPU when there is one), cpu, cuda or cuda:<index>")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=4096)
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        raise CrammingError(f"--steps and --repeats must be at least 1, got {args.steps} and {args.repeats}")
    if not 0 <= args.dropout < 1:
        raise CrammingError(f"--dropout must be in [0, 1), got {args.dropout}")
    chosen = [name.strip() for name in args.tasks.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FULL_SIZES]
    if unknown or not chosen:
        raise CrammingError(f"--tasks {args.tasks}: {', '.join(unknown) or 'none given'}; choose from "
                            f"{', '.join(FULL_SIZES)}")
    classic_glue_dir(args.glue_dir, "RTE/train.tsv")
    device = resolve_device(args.device, "--device")
    prepare_device(device)
    precision = Precision.resolve("auto", device, "precision")
    cfg = GlueConfig(data_dir=str(args.glue_dir), epochs=1 + args.repeats, dropout=args.dropout,
                     compile=COMPILE_CHOICES[args.compile])
    protocol = GlueConfig()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.ckpt or str(make_checkpoint(Path(tmp) / "checkpoint", args.glue_dir, args))
        encoder = open_encoder(checkpoint, cfg.dropout)
        where = (torch.cuda.get_device_name(device) if device.type == "cuda"
                 else f"{torch.get_num_threads()} CPU threads")
        what = args.ckpt or f"random {args.layers} layers x {args.hidden}"
        print(f"{what}, {where}, {precision.name}, compiled: {compiles(cfg.compile, device)}, dropout {cfg.dropout}; "
              f"{args.steps} steps of {cfg.batch_size} a task, medians of {args.repeats} timed epochs", flush=True)
        started, rows = time.perf_counter(), {}
        for name in FULL_SIZES:
            rows[name] = measure(name, encoder, cfg, args.steps, device, precision) if name in chosen else None
            if rows[name] is not None:
                print(f"{name}: {rows[name]['step_s'] * 1000:.1f} ms a step", flush=True)
    measured = [row for row in rows.values() if row is not None]
    if not measured:
        raise CrammingError(f"--glue-dir {args.glue_dir} holds none of the tasks {', '.join(chosen)}")
    mean = {key: statistics.mean(row[key] for row in measured) for key in ("step_s", "eval_rate", "first_extra_s")}
    print("\n| task | measured | ms a step | steps/s | dev examples/s | first epoch's extra s | steps (5 epochs, "
          "real size) | projected s |")
    print("|---|---|---|---|---|---|---|---|")
    total = 0.0
    for name, row in rows.items():
        seconds = projected(row or mean, name, protocol.epochs, protocol.batch_size)
        total += seconds
        steps = protocol.epochs * math.ceil(FULL_SIZES[name][0] / protocol.batch_size)
        if row is None:
            why = "not measured" if name in chosen else "left out"
            print(f"| {name} | {why}: the others' mean pace | | | | | {steps:,} | {seconds:,.0f} |")
        else:
            print(f"| {name} | {row['steps']} steps | {row['step_s'] * 1000:.1f} | "
                  f"{1 / row['step_s']:.1f} | {row['eval_rate']:.0f} | {row['first_extra_s']:.1f} | {steps:,} | "
                  f"{seconds:,.0f} |")
    print(f"\nwhole protocol (9 tasks, 5 epochs, one seed): projected {total / 60:,.1f} minutes "
          f"({total / 3600:.2f} h); measured in {time.perf_counter() - started:.0f} s")
