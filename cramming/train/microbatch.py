"""The microbatch of a pretraining run: on a GPU the largest that fits the profile's memory (or the card's, if
smaller) with what the techniques hold, found by trial steps and cached per model, precision and techniques; on
the CPU the profile's; a resumed run keeps its checkpoint's."""

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf

from cramming.data.mlm import synthetic_mlm_batch
from cramming.engine.precision import Precision
from cramming.engine.step import backward
from cramming.errors import CrammingError
from cramming.files import read_json_object, write_atomically
from cramming.train.distributed import Distributed
from cramming.train.settings import Settings
from cramming.train.techniques import microbatch_key

log = logging.getLogger("pretrain")

MEMORY_MARGIN = 0.1  # keep this fraction of the card free: allocator fragmentation, compiled graphs, pinned batches
CACHE_FILE = "microbatch.json"


def search_microbatch(step: Callable[[int], int], start: int, limit: int, usable_bytes: float) -> tuple[int, list]:
    """The largest power-of-two microbatch n <= limit whose `step(n)` (peak bytes) stays within usable_bytes.

    `step` raises torch.OutOfMemoryError when n does not fit at all. Returns n and the trials made as
    [n, peak bytes or None for out of memory, fits].
    """
    trials = []

    def fits(n: int) -> bool:
        try:
            peak = step(n)
        except torch.OutOfMemoryError:
            peak = None
        except Exception as error:  # anything else a step can meet (a kernel, cuDNN) stops the run here, named
            raise CrammingError(f"microbatch search: the trial step of microbatch {n} failed ({type(error).__name__}: "
                                f"{str(error).splitlines()[0] if str(error) else 'no message'}); set "
                                "impl.microbatch_size to skip the search, or see what fails with "
                                "python pretrain.py ... preflight=true") from None
        if peak is None and torch.cuda.is_available():  # outside the handler: its traceback held the tensors
            torch.cuda.empty_cache()
        ok = peak is not None and peak <= usable_bytes
        trials.append([n, peak, ok])
        shown = "out of memory" if peak is None else f"peak {peak / 2**30:.1f} of {usable_bytes / 2**30:.1f} GiB usable"
        log.info("microbatch search: %d %s (%s)", n, "fits" if ok else "does not fit", shown)
        return ok

    n = 1 << (max(min(start, limit), 1).bit_length() - 1)  # the largest power of two <= start
    if fits(n):
        while n * 2 <= limit and fits(n * 2):
            n *= 2
        return n, trials
    while n > 1:
        n //= 2
        if fits(n):
            return n, trials
    raise CrammingError("microbatch search: not even one sequence fits in GPU memory; use a smaller arch")


def cache_key(device: torch.device, arch: dict, seq_length: int, precision: str, world_size: int,
              optimizer: str = "adamw", technique_bytes: int = 0, memory_gb: float = 0.0,
              techniques: dict | None = None) -> str:
    """What the answer depends on: the card (and the profile's memory ceiling), the model, the sequence length,
    the precision, DDP's buffers, the optimizer (its state), what the techniques hold and what they change in a
    step's memory (cramming.train.techniques.microbatch_key: recomputed activations, fp8's casts)."""
    properties = torch.cuda.get_device_properties(device)
    described = {"gpu": properties.name, "memory": properties.total_memory, "arch": arch,
                 "seq_length": seq_length, "precision": precision, "ddp": world_size > 1}
    # each absent at its default, so that earlier runs' cached answers still match
    optional = {"optimizer": optimizer != "adamw" and optimizer, "technique_bytes": technique_bytes,
                "memory_gb": memory_gb, **(techniques or {})}
    described.update({key: value for key, value in optional.items() if value})
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def usable_bytes(total_memory: int, memory_gb: float) -> float:
    """The memory the search may fill: the card's, or less where the profile's memory_gb says so (a card
    shared with another job, or a profile that should behave like a smaller card), less the margin."""
    ceiling = min(total_memory, memory_gb * 2**30) if memory_gb > 0 else total_memory
    return (1 - MEMORY_MARGIN) * ceiling


def cached_search(cache_dir: Path, key: str, search: Callable[[], tuple[int, list]]) -> tuple[int, str]:
    """The cached microbatch for `key`, or the result of `search()`, then stored. Returns (size, source)."""
    path = cache_dir / CACHE_FILE
    entries = _cached_entries(path)
    if key in entries:
        log.info("microbatch %d (cached in %s)", entries[key]["microbatch_size"], path)
        return entries[key]["microbatch_size"], "cache"
    size, trials = search()
    entries[key] = {"microbatch_size": size, "trials": trials}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(entries, indent=1))
    log.info("microbatch %d (searched; cached in %s)", size, path)
    return size, "search"


def _cached_entries(path: Path) -> dict:
    """The cache's entries; a damaged cache (truncated, corrupted, of another shape) is searched anew and
    rewritten, as a missing one is."""
    if not path.exists():
        return {}
    try:
        entries = read_json_object(path)
        for entry in entries.values():
            if not (isinstance(entry, dict) and isinstance(entry.get("microbatch_size"), int)
                    and entry["microbatch_size"] >= 1):
                raise CrammingError(f"{path}: an entry is not a microbatch size")
    except CrammingError as problem:
        log.warning("%s; searching again", problem)
        return {}
    return entries


def cuda_step(model: torch.nn.Module, seq_length: int, vocab_size: int, mlm_rate: float, precision: Precision,
              extra_bytes: int):
    """A trial step for the search: forward and backward of n sequences; returns peak bytes.

    The batch is synthetic: memory depends on its shapes, not its text. `extra_bytes` is memory the trial
    does not allocate but training will: AdamW's two moments (and DDP's gradient buckets). The optimizer is
    not stepped and the gradients are dropped, so the trial leaves the model as it found it.
    """

    scaler = precision.grad_scaler()

    def step(n: int) -> int:
        device = next(model.parameters()).device
        synthetic = synthetic_mlm_batch(n, seq_length, vocab_size, mlm_rate)
        batch = {key: value.to(device) for key, value in synthetic.items()}
        torch.cuda.reset_peak_memory_stats(device)
        try:
            backward(model, batch, precision.autocast(), scaler)
            torch.cuda.synchronize(device)
            return torch.cuda.max_memory_allocated(device) + extra_bytes
        finally:
            del batch
            model.zero_grad(set_to_none=True)

    return step


def choose_microbatch(cfg, settings: Settings, dist: Distributed, model: torch.nn.Module, vocab_size: int,
                      seq_length: int, saved: dict | None, technique_bytes: int = 0) -> tuple[Settings, str]:
    """The microbatch size and where it came from, before the clock starts (the search is outside the budget).

    impl.microbatch_size when set; else a resumed run's checkpoint's (its fingerprint must match); else on
    the CPU the profile's; else on a GPU the largest power of two that fits, searched upward from the
    profile's microbatch_size and cached per GPU, architecture, sequence length and precision. Chosen here, it is
    never more than this rank's share of train.batch_size.
    technique_bytes: what the techniques hold beside a plain step (cramming.train.techniques.extra_memory).
    """
    if settings.microbatch_size is not None:
        return settings, "impl.microbatch_size"
    if saved is not None:
        return dataclasses.replace(settings, microbatch_size=saved["fingerprint"]["microbatch_size"]), "checkpoint"
    limit = max(cfg.train.batch_size // dist.world_size, 1)  # this rank's share of a step
    if settings.device.type == "cpu":
        if settings.profile.microbatch_size > limit:
            return dataclasses.replace(settings, microbatch_size=limit), "cpu profile, capped at train.batch_size"
        return dataclasses.replace(settings, microbatch_size=settings.profile.microbatch_size), "cpu profile"
    chosen = None
    if dist.is_main:
        parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        extra = parameter_bytes * (3 if dist.enabled else 2)  # AdamW's two moments, DDP's gradient buckets
        step = cuda_step(model, seq_length, vocab_size, cfg.train.mlm_rate, settings.precision,
                         extra + technique_bytes)
        total = torch.cuda.get_device_properties(settings.device).total_memory
        memory_gb = settings.profile.memory_gb if settings.profile.memory_gb * 2**30 < total else 0.0  # 0: the card's
        usable = usable_bytes(total, memory_gb)
        key = cache_key(settings.device, OmegaConf.to_container(cfg.arch, resolve=True), seq_length,
                        settings.precision.name, dist.world_size, cfg.train.optim.name, technique_bytes, memory_gb,
                        microbatch_key(cfg))
        with torch.random.fork_rng(devices=[settings.device]):
            chosen = cached_search(Path(cfg.cache_dir).expanduser(), key, lambda: search_microbatch(
                step, settings.profile.microbatch_size, limit, usable))
    size, source = dist.broadcast(chosen)
    return dataclasses.replace(settings, microbatch_size=size), f"auto ({source})"
