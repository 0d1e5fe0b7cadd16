"""Where runs live, and which checkpoint a command means by `resume=` or `ckpt=`.

A pretraining run is <output_dir>/<name>/<timestamp>/ with checkpoints/<step-NNNNNNNN | final>/ inside.
A checkpoint directory holds the model (model.safetensors, config.json), the tokenizer and, for
resuming, trainer_state.pt; it is written under a hidden temporary name and renamed into place when
complete, so a hidden or partial directory never counts.
"""

import re
import time
from pathlib import Path

from cramming.errors import CrammingError

WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "trainer_state.pt"
FINAL = "final"


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def new_run_dir(output_dir: str | Path, name: str) -> Path:
    """<output_dir>/<name>/<timestamp>, created; a suffix tells apart runs started in the same second."""
    run_dir = Path(output_dir) / name / time.strftime("%Y-%m-%d_%H-%M-%S")
    suffix = 1
    while run_dir.exists():
        run_dir = run_dir.with_name(f"{run_dir.name.split('.')[0]}.{suffix}")
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def is_complete(checkpoint: Path, need_state: bool = False) -> bool:
    """A finished checkpoint directory: not a hidden temporary one, with the weights (and trainer state)."""
    needed = (WEIGHTS_FILE, STATE_FILE) if need_state else (WEIGHTS_FILE,)
    return not checkpoint.name.startswith(".") and all((checkpoint / name).is_file() for name in needed)


def run_checkpoint(run_dir: Path, need_state: bool = False) -> Path | None:
    """A run's checkpoint: `final` when the run finished, else the one with the highest step number."""
    root = run_dir / "checkpoints"
    complete = [path for path in root.glob("*") if path.is_dir() and is_complete(path, need_state)]
    if any(path.name == FINAL for path in complete):
        return root / FINAL
    numbered = [(int(match.group(1)), path) for path in complete if (match := re.search(r"(\d+)$", path.name))]
    return max(numbered)[1] if numbered else None


def newest_run_checkpoint(root: Path, need_state: bool = False) -> Path | None:
    """Among the runs one or two levels below root (<name>/<timestamp> or <timestamp>), the checkpoint of
    the run that wrote its checkpoint last."""
    runs = {path.parent for pattern in ("*/checkpoints", "*/*/checkpoints") for path in root.glob(pattern)}
    checkpoints = [checkpoint for run in runs if (checkpoint := run_checkpoint(run, need_state))]
    return max(checkpoints, key=lambda c: (c / WEIGHTS_FILE).stat().st_mtime, default=None)


def resolve_checkpoint(spec: str, runs_root: str | Path, *, key: str, need_state: bool = False) -> Path:
    """The checkpoint directory that `<key>=<spec>` names, for every command alike.

    spec is a checkpoint directory; a run directory (its `final`, else its highest step); a directory of
    runs (the newest run's); or `latest`: the newest run under runs_root. "Newest" is the run whose
    checkpoint was written last. need_state: only checkpoints a training can resume from count.
    """
    what = f"complete checkpoint ({WEIGHTS_FILE}{' and ' + STATE_FILE if need_state else ''})"
    if spec == "latest":
        checkpoint = newest_run_checkpoint(Path(runs_root), need_state)
        if checkpoint is None:
            raise CrammingError(f"{key}=latest: no run with a {what} under {runs_root}")
        return checkpoint
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise CrammingError(f"{key}={spec}: no such directory")
    if is_complete(path, need_state):
        return path
    if (path / "checkpoints").is_dir():
        checkpoint = run_checkpoint(path, need_state)
        if checkpoint is None:
            raise CrammingError(f"{key}={spec}: this run has no {what} in {path / 'checkpoints'}")
        return checkpoint
    checkpoint = newest_run_checkpoint(path, need_state)
    if checkpoint is None:
        raise CrammingError(f"{key}={spec}: not a {what}, nor a run directory or a directory of runs with one")
    return checkpoint
