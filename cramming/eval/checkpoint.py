"""Turn the `ckpt=` argument into one checkpoint directory.

Pretraining writes runs as <runs_dir>/<name>/<timestamp>/checkpoints/<step or final>/, each checkpoint
holding model.safetensors, config.json and the tokenizer files.
"""

import re
from pathlib import Path

from cramming.errors import CrammingError

WEIGHTS = "model.safetensors"


def resolve_checkpoint(ckpt: str, runs_dir: str = "outputs") -> Path:
    """A checkpoint dir as given, a run dir's `final` (else highest-step) one, `latest` the newest run's.

    A directory of runs (e.g. outputs/<name>) resolves to its newest run.
    """
    if ckpt == "latest":
        runs = _runs_under(Path(runs_dir), depth=2)
        if not runs:
            raise CrammingError(f"ckpt=latest: no pretraining run with checkpoints under {runs_dir}/")
        return _run_checkpoint(_newest(runs))
    path = Path(ckpt)
    if not path.is_dir():
        raise CrammingError(f"checkpoint {ckpt}: no such directory")
    if (path / WEIGHTS).is_file():
        return path
    if (path / "checkpoints").is_dir():
        return _run_checkpoint(path)
    runs = _runs_under(path, depth=1)
    if runs:
        return _run_checkpoint(_newest(runs))
    raise CrammingError(
        f"checkpoint {ckpt}: no {WEIGHTS} here, nor a run with checkpoints/ "
        "(give a checkpoint dir, a run dir, or latest)"
    )


def _runs_under(root: Path, depth: int) -> list[Path]:
    """Run dirs `depth` levels below root that hold at least one checkpoint."""
    pattern = "/".join(["*"] * depth) + f"/checkpoints/*/{WEIGHTS}"
    return sorted({weights.parents[2] for weights in root.glob(pattern)})


def _newest(runs: list[Path]) -> Path:
    """The run whose latest checkpoint was written last."""
    return max(runs, key=lambda run: max(w.stat().st_mtime for w in run.glob(f"checkpoints/*/{WEIGHTS}")))


def _run_checkpoint(run: Path) -> Path:
    """`final` when the run finished, else the checkpoint with the highest step number."""
    candidates = [weights.parent for weights in (run / "checkpoints").glob(f"*/{WEIGHTS}")]
    if not candidates:
        raise CrammingError(f"run {run}: no checkpoint with {WEIGHTS} in {run / 'checkpoints'}")
    final = [c for c in candidates if c.name == "final"]
    if final:
        return final[0]
    steps = {c: re.search(r"(\d+)$", c.name) for c in candidates}
    numbered = [c for c, match in steps.items() if match]
    if not numbered:
        raise CrammingError(f"run {run}: no `final` checkpoint, nor one named by its step, in checkpoints/")
    return max(numbered, key=lambda c: int(steps[c].group(1)))
