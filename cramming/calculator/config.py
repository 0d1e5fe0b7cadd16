"""Typed schema of configs/calculator.yaml: every key is used, any other key is rejected."""

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.errors import CrammingError
from cramming.engine.hardware import GpuProfile


@dataclass
class CandidateGrid:
    depths: list[int] = field(default_factory=lambda: [2, 4, 6, 8, 10, 12, 16, 20, 24])
    widths: list[int] = field(default_factory=lambda: [128, 192, 256, 384, 512, 640, 768, 1024])
    head_size: int = 64  # heads = width / head_size
    ffn_ratio: int = 4  # intermediate_size = ffn_ratio x width (GLU halves), as in crammed-bert


# fit=true's shapes where fit_grid leaves them null: on a GPU a grid that holds the recipe's shape (16 x 768 at
# microbatch 128) and compiles as training does, 12 shapes; on the CPU small shapes, eager, 18.
GPU_FIT_GRID = {"depths": [4, 16], "widths": [256, 512, 768], "batches": [32, 128]}
CPU_FIT_GRID = {"depths": [1, 2, 4], "widths": [64, 128, 256], "batches": [8, 32]}


@dataclass
class FitGrid:
    """Shapes timed by fit=true: every depth x width x batch; null: this device's (GPU_FIT_GRID, CPU_FIT_GRID)."""

    depths: Optional[list[int]] = None
    widths: Optional[list[int]] = None
    batches: Optional[list[int]] = None  # include the microbatch you train with
    compile: Optional[bool] = None  # torch.compile each shape; null: as the profile trains (GPU profiles compile)
    warmup_steps: int = 1  # with compile, the first compiles
    steps: int = 3  # measured steps per shape; tokens/s over all of them

    def resolved(self, profile: GpuProfile) -> "FitGrid":
        """The grid with every null filled in for the profile's device."""
        grid = GPU_FIT_GRID if profile.device == "cuda" else CPU_FIT_GRID
        return replace(self, **{key: values for key, values in grid.items() if getattr(self, key) is None},
                       compile=profile.compile if self.compile is None else self.compile)


@dataclass
class SizeAnchor:
    """Where the size rule is anchored: crammed-bert (16 x 768) is the compute-optimal size for
    `hours` on `gpu` (the reference study's one A6000-day)."""

    gpu: str = "a6000"
    hours: float = 24.0


@dataclass
class CalculatorConfig:
    budget: float = 24.0  # GPU-hours
    gpu: GpuProfile = MISSING  # the Hydra group configs/gpu (gpu=auto: this machine's)
    fit: bool = False  # time training steps on this machine and store the speed constants of `gpu`
    check: bool = False  # train the recommended shape for check_seconds here; print predicted vs measured
    check_seconds: float = 30.0
    check_run: Optional[str] = None  # a pretraining run on this machine: its steady tokens/s against the prediction
    runs: Any = None  # metrics.jsonl paths, run directories or globs (a list or one string): the loss fit
    microbatch_size: Optional[int] = None  # sequences per forward; null: the profile's
    seq_length: int = 128
    vocab_size: int = 32768
    mlm_rate: float = 0.25
    loss_exponent: float = 0.05  # frontier exponent α to rank by without runs (Kaplan et al.'s L(C))
    candidates: CandidateGrid = field(default_factory=CandidateGrid)
    fit_grid: FitGrid = field(default_factory=FitGrid)
    anchor: SizeAnchor = field(default_factory=SizeAnchor)
    rows: int = 20  # rows of the printed table; the JSON has all
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"  # constants in <cache_dir>/calculator/
    output_dir: str = "outputs/calculator"


ConfigStore.instance().store(name="calculator_schema", node=CalculatorConfig)


def check_config(cfg: CalculatorConfig) -> None:
    if not cfg.budget > 0:
        raise CrammingError(f"budget={cfg.budget} must be positive (GPU-hours)")
    if not cfg.check_seconds > 0:
        raise CrammingError(f"check_seconds={cfg.check_seconds} must be positive")
    if not 0.0 < cfg.mlm_rate < 1.0 or round(cfg.mlm_rate * cfg.seq_length) < 1:
        raise CrammingError(f"mlm_rate={cfg.mlm_rate} must mask 1 to {cfg.seq_length - 1} tokens a row")
    if cfg.microbatch_size is not None and cfg.microbatch_size < 1:
        raise CrammingError(f"microbatch_size={cfg.microbatch_size} must be positive")
    grids = {"candidates.depths": cfg.candidates.depths, "candidates.widths": cfg.candidates.widths,
             "fit_grid.depths": cfg.fit_grid.depths, "fit_grid.widths": cfg.fit_grid.widths,
             "fit_grid.batches": cfg.fit_grid.batches}
    for key, values in grids.items():
        if values is not None and (not values or min(values) < 1):
            raise CrammingError(f"{key}={list(values)} must be a non-empty list of positive integers")
    for width in list(cfg.candidates.widths) + list(cfg.fit_grid.widths or []):
        if width % 2 or width % min(width, cfg.candidates.head_size):
            raise CrammingError(
                f"width {width} must be even and a multiple of head_size={cfg.candidates.head_size}")
    if not 0 < cfg.loss_exponent < 1:
        raise CrammingError(f"loss_exponent={cfg.loss_exponent} must be in (0, 1)")
    if cfg.vocab_size <= 5:
        raise CrammingError(f"vocab_size={cfg.vocab_size} must exceed the 5 special tokens")
