"""GLUE fine-tuning speed with and without unpadding, side by side in one process.

    python scripts/bench_glue_speed.py --glue-dir <GLUE folder> [--examples 800] [--repeats 3]
        [--layers 2 --hidden 128 --heads 4 --intermediate 512] [--vocab 4096] [--device auto]

On a CPU, --examples and --repeats left out are 200 and 2, and a line says so: 800 x 3 took over 10 minutes
on two CPU cores; 200 x 2, about two.

A crammed-bert model (random weights: speed does not depend on skill) with a WordPiece tokenizer trained on
the tasks' own text fine-tunes one epoch on a fixed subset of RTE and MRPC and scores their dev sets, once
padded (each batch padded to its longest example) and once unpadded, interleaved `--repeats` times. Prints the
median examples/s of both, their ratio, and the final training loss of each
(equal up to dropout's random draws, which differ between the two layouts).
"""

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer
from cramming.engine.device import prepare_device, resolve_device
from cramming.errors import exit_on_user_error
from cramming.eval.batching import subset
from cramming.eval.tasks.registry import GlueConfig
from cramming.eval.encoders import open_encoder
from cramming.eval.finetune import evaluate, finetune
from cramming.eval.tasks.glue import classic_glue_dir
from cramming.eval.tasks.registry import task_named
from cramming.engine.precision import Precision
from cramming.model import ModelConfig, build_mlm_model
from cramming.model.checkpoint import save_pretrained
from cramming.model.crammed_bert import Encoder

TASKS = ("rte", "mrpc")
SIZES = {"gpu": (800, 3), "cpu": (200, 2)}  # --examples, --repeats when left out


def padded_path():
    """The encoder without unpadding: every batch at its padded shape."""
    return mock.patch.object(Encoder, "_unpadded", staticmethod(lambda attention_mask, positions: None))


def make_checkpoint(directory: Path, glue_dir: Path, args) -> Path:
    texts = []
    for task in TASKS:
        split = task_named(task)().load(str(glue_dir), 0.001).train
        texts += split.text_a + [text for text in split.text_b or [] if text]
    tokenizer_cfg = TokenizerConfig(kind="wordpiece", vocab_size=args.vocab, min_frequency=1)
    tokenizer = as_transformers_tokenizer(train_tokenizer(texts, tokenizer_cfg, NormalizeConfig()))
    arch = ModelConfig(name="bench", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                       intermediate_size=args.intermediate)
    torch.manual_seed(0)
    save_pretrained(build_mlm_model(arch, args.vocab), directory, tokenizer)
    return directory


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path, help="a folder of the classic GLUE TSVs (<task>/train.tsv, dev.tsv)")
    parser.add_argument("--examples", type=int, help="training examples per task, a fixed subset (default: 800, "
                                                       "200 on a CPU)")
    parser.add_argument("--repeats", type=int, help="default: 3, 2 on a CPU")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--device", default="auto", help="auto (the GPU when there is one), cpu, cuda or cuda:<index>")
    args = parser.parse_args()
    classic_glue_dir(args.glue_dir)
    device = resolve_device(args.device, "--device")
    left_out = args.examples is None or args.repeats is None
    examples, repeats = SIZES["cpu" if device.type == "cpu" else "gpu"]
    args.examples = examples if args.examples is None else args.examples
    args.repeats = repeats if args.repeats is None else args.repeats
    if device.type == "cpu" and left_out:
        print(f"on the CPU: --examples {args.examples} --repeats {args.repeats}, to end in minutes (a GPU's "
              f"{SIZES['gpu'][0]} x {SIZES['gpu'][1]} takes over 10 minutes here); set them to choose", flush=True)
    classic_glue_dir(args.glue_dir, "RTE/train.tsv", "MRPC/train.tsv")

    prepare_device(device)
    precision = Precision.resolve("fp32", device, "precision")
    cfg = GlueConfig(data_dir=str(args.glue_dir), epochs=1)
    with tempfile.TemporaryDirectory() as tmp:
        encoder = open_encoder(str(make_checkpoint(Path(tmp) / "checkpoint", args.glue_dir, args)), cfg.dropout)
        pad_id = encoder.tokenizer.pad_token_id
        where = (torch.cuda.get_device_name(device) if device.type == "cuda"
                 else f"{torch.get_num_threads()} CPU threads")
        print(f"{args.layers} layers x {args.hidden}, vocab {args.vocab}, {where}; "
              f"{args.examples} training examples per task, batch {cfg.batch_size}, eval batch {cfg.eval_batch_size}")
        for name in TASKS:
            task = task_named(name)()
            data = task.load(str(args.glue_dir), cfg.max_malformed_fraction)
            train = subset(task.encode(data.train, encoder.tokenizer, cfg.max_length), args.examples)
            dev_name, dev_split = next(iter(data.evaluations.items()))
            dev = task.encode(dev_split, encoder.tokenizer, cfg.max_length)
            rates = {"padded": {"train": [], "eval": []}, "unpadded": {"train": [], "eval": []}}
            losses = {}
            for _ in range(args.repeats):
                for layout, context in (("padded", padded_path), ("unpadded", contextlib.nullcontext)):
                    with context():
                        classifier = task.model(encoder, cfg.dropout, 0)
                        started = time.perf_counter()
                        history = finetune(classifier, train, {}, cfg, device, precision, 0, pad_id, name, task.score)
                        rates[layout]["train"].append(len(train) / (time.perf_counter() - started))
                        started = time.perf_counter()
                        evaluate(classifier, dev, dev_name, task.score, cfg.eval_batch_size, device, precision, pad_id)
                        rates[layout]["eval"].append(len(dev) / (time.perf_counter() - started))
                        losses[layout] = history[-1]["train_loss"]
            real = sum(len(row) for row in train.input_ids) / len(train)
            for part in ("train", "eval"):
                before, after = (statistics.median(rates[layout][part]) for layout in ("padded", "unpadded"))
                print(f"{name} {part}: padded {before:.0f} examples/s, unpadded {after:.0f} examples/s, "
                      f"{after / before:.2f}x")
            print(f"{name}: mean length {real:.1f} tokens; final training loss padded {losses['padded']:.4f}, "
                  f"unpadded {losses['unpadded']:.4f}")
