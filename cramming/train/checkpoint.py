"""Training checkpoints: model (safetensors) + tokenizer + trainer state, written atomically.

A checkpoint directory `checkpoints/step-00001234/` (or `final/`) is what `eval_glue.py` and
`transformers` read, plus `trainer_state.pt` (optimizer, scaler, RNG, data position, clock) that a
resume loads with `torch.load(weights_only=True)`: no code is ever unpickled.
"""

import os
import shutil
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerFast

from cramming.errors import CrammingError
from cramming.model import save_pretrained

STATE_FILE = "trainer_state.pt"
FINAL = "final"


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def save_checkpoint(
    run_dir: Path, name: str, model: nn.Module, tokenizer: PreTrainedTokenizerFast, state: dict, keep_last: int
) -> Path:
    """Write into a temporary directory, then rename it into place; prune old step checkpoints."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    target, tmp, old = root / name, root / f".{name}.tmp", root / f".{name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tmp, tokenizer)
    torch.save(state, tmp / STATE_FILE)
    if target.exists():  # only `final` is ever rewritten (a resumed, finished run)
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
    for stale in sorted(root.glob("step-*"))[:-keep_last] if keep_last > 0 else sorted(root.glob("step-*")):
        shutil.rmtree(stale, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """`final` if the run finished, else its highest step checkpoint."""
    root = run_dir / "checkpoints"
    if (root / FINAL / STATE_FILE).exists():
        return root / FINAL
    steps = sorted(path for path in root.glob("step-*") if (path / STATE_FILE).exists())
    return steps[-1] if steps else None


def resolve_resume(resume: str, output_dir: Path, name: str) -> Path:
    """A checkpoint dir from `resume=<checkpoint dir | run dir | latest>`."""
    if resume == "latest":
        runs = sorted((output_dir / name).glob("*"), reverse=True) if (output_dir / name).is_dir() else []
        for run_dir in runs:
            if checkpoint := latest_checkpoint(run_dir):
                return checkpoint
        raise CrammingError(f"resume=latest: no run of {name!r} with a checkpoint under {output_dir / name}")
    path = Path(resume).expanduser()
    if (path / STATE_FILE).exists():
        return path
    if path.is_dir() and (checkpoint := latest_checkpoint(path)):
        return checkpoint
    raise CrammingError(f"resume={resume}: not a checkpoint or a run directory with checkpoints")


def load_state(checkpoint: Path) -> dict:
    try:
        return torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file
        raise CrammingError(f"cannot read {checkpoint / STATE_FILE}: {error}") from None
