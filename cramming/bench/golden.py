"""The golden runs: a small, fully deterministic pretraining and GLUE fine-tuning whose numbers are pinned
in tests/golden/, so that any change in what training computes (a package update, a refactor, a
"harmless" speed-up) shows the same day. `python scripts/update_golden.py --glue-dir <GLUE folder>` re-records
them on purpose.

Everything is fixed: a synthetic corpus made here (no download, no dependence on the Python version),
a deterministic tokenizer, step-based progress, seeded data order, masking and initialization, and
impl.deterministic=true.
"""

import json
import math
import random
from pathlib import Path

from omegaconf import OmegaConf

from cramming import compose_config
from cramming.data.prepare import prepare_dataset
from cramming.files import read_json_object, write_atomically
from cramming.model.checkpoint import load_pretrained
from cramming.pretraining import PretrainConfig, pretrain  # noqa: F401  (PretrainConfig registers the schemas)
from cramming.train.validation import validate

PRETRAIN_FILE, GLUE_FILE = "pretrain-tiny.json", "glue-rte-subset.json"
CHECKED_STEPS = (1, 5, 10, 20, 30, 40, 50, 60)
# Relative tolerance of the losses and the weight norm: far above what floating-point noise moves in 60
# steps, far below what a change to training moves (both measured: docs/reproduce.md).
TOLERANCE = 2e-5
ACCURACY_TOLERANCE = 1.5  # points of RTE accuracy (277 dev examples: one example is 0.36 points)


def synthetic_corpus(documents: int = 10000, seed: int = 0) -> str:
    """A made-up language an MLM can learn something of in 60 steps: a Zipf-distributed lexicon of
    syllable words (a few accented), each word followed by one of its four preferred successors 70% of the
    time, sentences with a capital and a stop. Python's `random` with a seed is stable across versions."""
    rng = random.Random(seed)
    syllables = [consonant + vowel for consonant in "bdfgklmnprstvz" for vowel in "aeiou"] + ["lé", "ñu", "zö"]
    lexicon = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(700)})
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    successors = {word: rng.sample(lexicon, 4) for word in lexicon}
    paragraphs = []
    for _ in range(documents):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            words = rng.choices(lexicon, weights)
            for _ in range(rng.randint(4, 12)):
                following = (rng.choice(successors[words[-1]]) if rng.random() < 0.7
                             else rng.choices(lexicon, weights)[0])
                words.append(following)
            sentences.append(" ".join(words).capitalize() + rng.choice(".....!?"))
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs) + "\n"


def pretrain_overrides(corpus: Path, workdir: Path) -> list[str]:
    return [
        "data=local", f"data.files={corpus}", "data.tokenizer.vocab_size=512", "arch=crammed-bert-tiny",
        "gpu=cpu", "train=steps", f"train.max_steps={CHECKED_STEPS[-1]}", "train.batch_size=64",
        "impl.microbatch_size=16", "impl.deterministic=true", "budget=1", "logging.every_steps=1",
        "checkpoint.interval_minutes=10000", "name=golden", f"output_dir={workdir / 'outputs'}",
        f"cache_dir={workdir / 'cache'}",
        # training is what is pinned here; the zero-shot probe only reads the model (test_validation.py), the
        # plots only the records
        "train.validation.zero_shot=false", "logging.plots=false",
    ]


def run_pretraining(workdir: Path, extra_overrides: tuple[str, ...] = ()) -> tuple[dict, Path]:
    """The golden pretraining in this process (with `extra_overrides`, a deliberately changed one, or a
    shorter train.max_steps): its numbers (losses at the CHECKED_STEPS it reached, validation loss, norm of
    the final weights) and final checkpoint."""
    corpus = workdir / "corpus.txt"
    if not corpus.exists():  # written once per workdir: its prepared dataset is then reused from the cache
        corpus.write_text(synthetic_corpus())
    cfg = compose_config("pretrain", [*pretrain_overrides(corpus, workdir), *extra_overrides])
    run_dir = pretrain(cfg)
    records = {r["step"]: r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    checkpoint = run_dir / "checkpoints" / "final"
    model, _ = load_pretrained(checkpoint)
    dataset, _ = prepare_dataset(OmegaConf.to_object(cfg.data), cfg.cache_dir)
    loss = validate(model, dataset, cfg.train.mlm_rate)["val_loss"]  # the held-out rows (data.validation_rows)
    norm = math.sqrt(sum(float(parameter.detach().double().square().sum()) for parameter in model.parameters()))
    losses = {str(step): records[step] for step in CHECKED_STEPS if step in records}  # all, unless shortened
    numbers = {"losses": losses, "validation_loss": round(loss, 6),
               "weight_norm": round(norm, 6)}
    return numbers, checkpoint


def glue_overrides(glue_dir: Path) -> dict:
    return {"tasks": ["rte"], "data_dir": str(glue_dir), "max_train_examples": 256, "epochs": 2, "seeds": [0],
            "device": "cpu"}


def run_glue_subset(checkpoint: Path, glue_dir: Path, workdir: Path, changes: dict | None = None) -> dict:
    """RTE on a fixed 256-example training subset, 2 epochs, seed 0 (with `changes` to the eval config, a
    deliberately changed one): the accuracy and the training losses."""
    from cramming.eval.run import run_glue  # noqa: PLC0415 -- transformers: only when the GLUE subset runs

    results = run_glue({**glue_overrides(glue_dir), **(changes or {})}, checkpoint, workdir / "glue")
    epochs = results["tasks"]["rte"]["seeds"]["0"]
    return {"rte_accuracy": results["scores"]["rte"]["accuracy"],
            "train_losses": [round(epoch["train_loss"], 6) for epoch in epochs]}


def mismatches(reference: dict, measured: dict) -> list[str]:
    """Every number of `measured` outside its tolerance of `reference`, as one line each."""
    found = []

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=TOLERANCE)

    for step, loss in reference.get("losses", {}).items():
        if not close(measured["losses"][step], loss):
            found.append(f"loss at step {step}: {measured['losses'][step]} vs golden {loss}")
    for key in ("validation_loss", "weight_norm"):
        if key in reference and not close(measured[key], reference[key]):
            found.append(f"{key.replace('_', ' ')}: {measured[key]} vs golden {reference[key]}")
    if "rte_accuracy" in reference and abs(measured["rte_accuracy"] - reference["rte_accuracy"]) > ACCURACY_TOLERANCE:
        found.append(f"RTE accuracy: {measured['rte_accuracy']:.2f} vs golden {reference['rte_accuracy']:.2f}")
    for epoch, (loss, golden) in enumerate(zip(measured.get("train_losses", []), reference.get("train_losses", []))):
        if not close(loss, golden):
            found.append(f"RTE training loss of epoch {epoch + 1}: {loss} vs golden {golden}")
    return found


def read(golden_dir: Path, name: str) -> dict:
    return read_json_object(golden_dir / name)


def write(golden_dir: Path, name: str, numbers: dict, recorded_with: dict) -> None:
    """The numbers, and the environment they were recorded in (for the reviewer of a changed file)."""
    payload = {"recorded_with": recorded_with, **numbers}
    write_atomically(golden_dir / name, json.dumps(payload, indent=2) + "\n")
