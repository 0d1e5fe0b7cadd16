"""Resuming a run: restoring it from a checkpoint (its trainer state loaded with `torch.load(weights_only=True)`,
so no code is ever unpickled; the settings a resume must share with it, its fingerprint; the model, optimizer,
loss scaler and RNG put back as they were), the directory it goes on writing in (`run_directory`), and charging
it the training a crash lost after that checkpoint, which rank 0's heartbeat file shows.
"""

import copy
import dataclasses
import json
import logging
import pickle
import warnings
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn

from cramming.data.sources import DataConfig
from cramming.errors import CrammingError
from cramming.files import write_atomically
from cramming.model import build_mlm_model
from cramming.model.checkpoint import check_declared_shapes, declared_sizes, load_weights, read_weights
from cramming.model.config import ModelConfig, as_model_config
from cramming.train.callbacks import Callback, TrainState
from cramming.train.checkpointing import finite_optimizer_state
from cramming.train.config import TrainConfig
from cramming.train.distributed import Distributed
from cramming.train.runs import STATE_FILE, differences, flatten, new_run_dir, read_records, resumed_run_dir
from cramming.train.stopping import Progress

log = logging.getLogger("pretrain")

RESUME_MUST_MATCH = ("arch", "data", "train")
# What a resume may change of the fingerprinted settings: the way out of a diverged run is its last good
# checkpoint with a lower lr; a larger max_steps extends a run on purpose; data.files names the same files moved.
RESUME_MAY_CHANGE = (("train", "optim", "lr"), ("train", "max_nonfinite_steps"),
                     ("train", "check_nonfinite_every"), ("train", "max_steps"), ("data", "files"))


STATE_KEYS = {"progress", "optimizer", "scaler", "rng", "callbacks", "fingerprint"}
REQUIRED_PROGRESS = {"step", "microbatches", "tokens", "elapsed"}  # later fields have defaults


def load_state(checkpoint: Path) -> dict:
    """The trainer state of a checkpoint, loaded without running any code; one line if it is not ours."""
    path = checkpoint / STATE_FILE
    try:
        with warnings.catch_warnings():  # torch's warnings about a foreign file's pickle protocol: ours says it
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # objects that could run code on loading: never loaded
        raise CrammingError(f"cannot read {path}: it holds Python objects other than tensors and plain values, "
                            "so it was not written by this program; it is not loaded") from None
    except Exception as error:  # truncated, damaged, or not a torch file
        raise CrammingError(f"cannot read {path}: truncated or damaged ({type(error).__name__})") from None
    missing = STATE_KEYS - set(state) if isinstance(state, dict) else STATE_KEYS
    progress = {field.name for field in dataclasses.fields(Progress)}
    if (missing or not isinstance(state["progress"], dict)
            or not REQUIRED_PROGRESS <= set(state["progress"]) <= progress):
        what = f"missing {', '.join(sorted(missing))}" if missing else "its progress has other fields"
        raise CrammingError(f"{path} is not a trainer state of this version ({what})")
    return state


def resume_fingerprint(cfg, microbatch_size: int, world_size: int) -> dict:
    """What a resumed run must share with its checkpoint for the continuation to be exact."""
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in RESUME_MUST_MATCH}
    return {**sections, "microbatch_size": microbatch_size, "world_size": world_size}


def _schema_defaults() -> dict:
    """The schema defaults of the fingerprinted sections (those with any: arch and train; data's too)."""
    return {key: OmegaConf.to_container(OmegaConf.structured(schema)) for key, schema in
            (("arch", ModelConfig), ("data", DataConfig), ("train", TrainConfig))}


def restore(checkpoint: Path, saved: dict, fingerprint: dict, resume: str, model: nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device) -> Progress:
    """Put model, optimizer, scaler and RNG back as `saved` (the checkpoint's trainer state) has them."""
    ours, theirs = copy.deepcopy(fingerprint), copy.deepcopy(saved["fingerprint"])
    for path in RESUME_MAY_CHANGE:
        before, now = _pop(theirs, path), _pop(ours, path)
        if before != now:
            log.warning("resume: %s changed from %s to %s", ".".join(path), before, now)
    check_same_settings(theirs, ours, resume)
    load_weights(model, read_weights(checkpoint), checkpoint)
    if not finite_optimizer_state(saved["optimizer"]):
        raise CrammingError(f"resume={resume}: the optimizer state in {checkpoint} is not finite (the run diverged "
                            "before it was written); resume from an earlier checkpoint")
    try:
        optimizer.load_state_dict(saved["optimizer"])
    except (ValueError, KeyError) as error:
        raise CrammingError(f"resume={resume}: the optimizer state in {checkpoint} does not fit this model "
                            f"({error})") from None
    if saved["scaler"]:
        scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["rng"]["torch"])
    if device.type == "cuda" and saved["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(saved["rng"]["cuda"], device)
    return Progress(**saved["progress"])


def check_same_settings(theirs: dict, ours: dict, resume: str) -> None:
    """The fingerprinted settings (or a part of them) of a checkpoint and of its resume are the same; a key
    the checkpoint predates is fine at its default (what the older code did without it)."""
    defaults = flatten(_schema_defaults())
    differing = [(key, before, now) for key, before, now in differences(theirs, ours)
                 if not (before == "(absent)" and key in defaults and now == defaults[key])]
    if differing:
        shown = "; ".join(f"{key}: {before} in the checkpoint, {now} now" for key, before, now in differing[:3])
        raise CrammingError(f"resume={resume}: the settings differ from the checkpoint's ({shown}"
                            f"{'; ...' if len(differing) > 3 else ''}); resume with the same settings, or start a "
                            "new run")


def check_resumed_model(checkpoint: Path, saved: dict, cfg, vocab_size: int) -> None:
    """Before the model a resume trains is given memory: its arch is the one the checkpoint trained (the
    fingerprint in its trainer state), and its weights' shapes are those in its model.safetensors."""
    arch = as_model_config(cfg.arch)
    check_same_settings({"arch": saved["fingerprint"].get("arch", {})},
                        {"arch": OmegaConf.to_container(cfg.arch, resolve=True)}, cfg.resume)
    check_declared_shapes(checkpoint, lambda: build_mlm_model(arch, vocab_size),
                          declared_sizes(arch, vocab_size), "the config this resume trains with")


def _pop(tree: dict, path: tuple[str, ...]):
    """Remove and return the value at `path` of a nested dict."""
    for key in path[:-1]:
        tree = tree.get(key, {})
    return tree.pop(path[-1], None)


HEARTBEAT_FILE = "heartbeat.json"
HEARTBEAT_INTERVAL_S = 10.0


class Heartbeat(Callback):
    """Rank 0 writes {"elapsed", "step"} at most every `interval_s` seconds of the budget clock, checked after
    each step (never inside one: a crash mid-step loses that step's time uncharged, at most one step's)."""

    name = "heartbeat"

    def __init__(self, run_dir: Path, interval_s: float | None = None):
        self.path, self.written_at = run_dir / HEARTBEAT_FILE, float("-inf")
        self.interval_s = HEARTBEAT_INTERVAL_S if interval_s is None else interval_s

    def on_train_start(self, state: TrainState) -> None:
        self._beat(state)

    def after_step(self, state: TrainState) -> None:
        if state.progress.elapsed - self.written_at >= self.interval_s:
            self._beat(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        self._beat(state)

    def _beat(self, state: TrainState) -> None:
        self.written_at = state.progress.elapsed  # the budget clock where the last step ended
        write_atomically(self.path, json.dumps({"elapsed": round(self.written_at, 3), "step": state.progress.step}))


def charge_lost_time(run_dir: Path, progress: Progress) -> float:
    """On a resume into `run_dir`: charge the training its heartbeat shows beyond the checkpoint. Returns
    the seconds charged (0 if none or no heartbeat)."""
    path = run_dir / HEARTBEAT_FILE
    try:
        elapsed = float(json.loads(path.read_text())["elapsed"])
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or torn by a kill mid-write: nothing to charge
        return 0.0
    lost = max(elapsed - progress.elapsed, 0.0)
    if lost > 0:
        progress.elapsed += lost
        progress.lost_to_crashes += lost
        log.warning("resume: %.1f s of training after the checkpoint were lost; charged to the budget", lost)
    return lost


def run_directory(cfg, dist: Distributed, checkpoint: Path | None, progress: Progress) -> Path:
    """Where the run writes (cramming.train.runs.resumed_run_dir): a resumed run goes on in its own directory, charged
    the training a crash lost after the checkpoint; a new run, or one resumed from a checkpoint elsewhere, gets a
    new directory (the latter with the records up to its step)."""
    run_dir = None
    if dist.is_main:
        run_dir = resumed_run_dir(cfg.output_dir, cfg.name, checkpoint)
        if run_dir is not None:
            charge_lost_time(run_dir, progress)
        else:
            run_dir = new_run_dir(cfg.output_dir, cfg.name)
            if checkpoint is not None:
                earlier = [r for r in read_records(checkpoint.parent.parent / "metrics.jsonl")
                           if r["step"] <= progress.step]
                write_atomically(run_dir / "metrics.jsonl", "".join(json.dumps(record) + "\n" for record in earlier))
                log.info("resuming into a new run directory %s (the checkpoint's is outside %s)", run_dir,
                         (Path(cfg.output_dir) / cfg.name).resolve())
    run_dir = Path(dist.broadcast(str(run_dir) if run_dir else None))
    progress.elapsed = dist.broadcast(progress.elapsed)  # the time charged on rank 0, on every rank
    progress.lost_to_crashes = dist.broadcast(progress.lost_to_crashes)
    return run_dir
