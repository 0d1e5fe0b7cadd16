"""Where runs live, and which checkpoint a command means by `resume=` or `ckpt=`.

A pretraining run is <output_dir>/<name>/<timestamp>/ with checkpoints/<step-NNNNNNNN | final>/ inside, and
config.yaml: every config the run trained with, one YAML document per session (a resume appends its own).
A checkpoint directory holds the model (model.safetensors, config.json), the tokenizer and, for
resuming, trainer_state.pt; it is written under a hidden temporary name and renamed into place when
complete, so a hidden or partial directory never counts.
"""

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cramming.errors import CrammingError, require
from cramming.files import folder_name, write_atomically

WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "trainer_state.pt"
CONFIG_FILE = "config.yaml"
FINAL = "final"
DOCUMENT_START = "---"


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def check_run_name(name) -> None:
    """`name` is one folder inside output_dir (files.folder_name): what a new run's directory is made of."""
    require([folder_name("name", name, "<output_dir>/<name>/<timestamp>")])


def new_run_dir(output_dir: str | Path, name: str) -> Path:
    """<output_dir>/<name>/<timestamp>, created; a suffix tells apart runs started in the same second."""
    check_run_name(name)
    run_dir = Path(output_dir) / name / time.strftime("%Y-%m-%d_%H-%M-%S")
    suffix = 1
    while run_dir.exists():
        run_dir = run_dir.with_name(f"{run_dir.name.split('.')[0]}.{suffix}")
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def resumed_run_dir(output_dir: str | Path, name: str, checkpoint: Path | None) -> Path | None:
    """The directory a resumed run goes on writing in: the checkpoint's own run when it lies under
    <output_dir>/<name>; None where the run gets a new one (no resume, or a checkpoint from elsewhere)."""
    if checkpoint is None or (Path(output_dir) / name).resolve() not in checkpoint.resolve().parents:
        return None
    return checkpoint.parent.parent


def read_records(path: Path) -> list[dict]:
    """The records of a metrics.jsonl; a torn last line (the run was killed while writing it) is left out.
    A damaged line elsewhere is an error: the file was changed by something other than a run."""
    lines = path.read_text().splitlines() if path.exists() else []
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
            if number == len(lines):
                continue
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise CrammingError(f"{path}, line {number}: not a JSON record of a step")
        records.append(record)
    return records


class RunStart:
    """The start of a command's run in `directory` (set now or once it exists), up to `done()`. When the start
    fails (a bad checkpoint, no data, W&B not starting) and the directory holds only what the start wrote
    (`leftovers`: the config, a log, W&B's folder), it is removed: a failed start leaves no folder that looks
    like a run. What fails after `done()` keeps its directory, as does one holding anything else."""

    def __init__(self, leftovers: tuple[str, ...], directory: Path | None = None):
        self.leftovers, self.directory, self.started = leftovers, directory, False

    def done(self) -> None:
        self.started = True

    def __enter__(self) -> "RunStart":
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        folder = self.directory
        if kind is not None and not self.started and folder is not None and folder.is_dir() \
                and all(entry.name in self.leftovers for entry in folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
        return False


def run_of(checkpoint: Path) -> Path | None:
    """The run directory a checkpoint belongs to (<run>/checkpoints/<name>); None for one outside a run."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def comparison_path(kind: str, output_dir: str | Path = "outputs") -> Path:
    """Where a plot comparing runs goes unless told: <output_dir>/comparisons/<timestamp>-<kind>.png, beside
    the runs' own directories, never over an earlier one."""
    return Path(output_dir) / "comparisons" / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}-{kind}.png"


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


def record_config(run_dir: Path, config, earlier_run: Path | None = None) -> None:
    """Append the (resolved) config this session of the run trains with to <run_dir>/config.yaml, as one more
    YAML document headed by the time: the file keeps every config the run ran with, never overwritten. A run
    resumed into a new directory starts its file with the configs of `earlier_run`, the run it continues."""
    path = run_dir / CONFIG_FILE
    source = path if path.is_file() else earlier_run / CONFIG_FILE if earlier_run else None
    before = source.read_text() if source is not None and source.is_file() else ""
    document = f"# {time.strftime('%Y-%m-%d %H:%M:%S')}\n{OmegaConf.to_yaml(config, resolve=True)}"
    write_atomically(path, f"{before}{DOCUMENT_START}\n{document}" if before.strip() else document)


def run_configs(run_dir: Path) -> list[DictConfig]:
    """Every config a run trained with, oldest first (one for a run never resumed)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise CrammingError(f"{run_dir}: no {CONFIG_FILE}; is it a pretraining run directory?")
    documents, current = [], []
    for line in path.read_text().splitlines(keepends=True):
        if line.rstrip() == DOCUMENT_START:
            documents.append("".join(current))
            current = []
        else:
            current.append(line)
    documents.append("".join(current))
    try:
        configs = [OmegaConf.create(document) for document in documents if document.strip()]
    except (OmegaConfBaseException, yaml.YAMLError) as error:
        raise CrammingError(f"cannot read {path}: {str(error).splitlines()[0]}") from None
    if not configs or not all(isinstance(config, DictConfig) for config in configs):
        raise CrammingError(f"cannot read {path}: not a run's config (a YAML mapping per document)")
    return configs


def run_config(run_dir: Path) -> DictConfig:
    """The config a run trained with last: what its newest checkpoint was written under."""
    return run_configs(run_dir)[-1]


@dataclass(frozen=True)
class LossBasis:
    """What a run's MLM loss is measured against. Losses per masked token compare only between runs of one
    tokenizer (another splits the text into other tokens) and one mask rate (another asks for more or less of
    each row); bits per character compares across both."""

    tokenizer: str  # as said: "wordpiece 4096"
    # the SHA-256 of its newest checkpoint's tokenizer.json without the truncation and padding a call asks for
    # (a run of 64-token rows saves the same vocabulary as one of 128), else its data config
    tokenizer_id: str
    mlm_rate: float


def loss_basis(run_dir: Path) -> LossBasis | None:
    """The LossBasis of a run directory; None without a config.yaml that says it."""
    try:
        config = run_config(run_dir)
    except CrammingError:
        return None
    kind, name, size, rate = (OmegaConf.select(config, key) for key in (
        "data.tokenizer.kind", "data.tokenizer.name", "data.tokenizer.vocab_size", "train.mlm_rate"))
    if kind is None or rate is None:
        return None
    said = f"{kind} {name if kind == 'pretrained' else size}"
    checkpoint = run_checkpoint(run_dir)
    if checkpoint is not None and (checkpoint / "tokenizer.json").is_file():
        saved = {key: value for key, value in json.loads((checkpoint / "tokenizer.json").read_text()).items()
                 if key not in ("truncation", "padding")}
        identity = hashlib.sha256(json.dumps(saved, sort_keys=True).encode()).hexdigest()
    else:  # no checkpoint yet: the corpus and the tokenizer's settings, which train it
        identity = json.dumps(OmegaConf.to_container(config.data, resolve=True), sort_keys=True)
    return LossBasis(said, identity, float(rate))


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"train": {"optim": {"lr": 1e-3}}} -> {"train.optim.lr": 1e-3}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def differences(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every key whose values differ, a key missing on one side included."""
    flat_a, flat_b = flatten(a), flatten(b)
    keys = sorted(set(flat_a) | set(flat_b))
    return [(key, flat_a.get(key, "(absent)"), flat_b.get(key, "(absent)")) for key in keys
            if flat_a.get(key, "(absent)") != flat_b.get(key, "(absent)")]
