"""How training runs, in one place: the device, the precision policy, the optimizer, the schedules.

Pretraining, GLUE fine-tuning, the benchmark, the calculator and the microbatch search all take these
from here, so a speed figure, a GLUE score and a pretraining run mean the same thing by "bf16" or "AdamW".
"""

import contextlib
import math
import os
from dataclasses import dataclass

import torch
from omegaconf import OmegaConf
from torch import nn

from cramming import CONFIG_DIR
from cramming.errors import CrammingError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LR_SCHEDULES = ("triangle", "constant", "linear", "cosine", "wsd", "one-cycle", "inverse-sqrt")
WSD_DECAY_FRACTION = 0.2  # wsd decays linearly to zero over the last fifth of training
ONE_CYCLE_START, ONE_CYCLE_END = 1 / 25, 1 / 25 / 1e4  # torch OneCycleLR's div_factor and final_div_factor


# --- device ---------------------------------------------------------------------------------------


def resolve_device(spec: str, key: str) -> torch.device:
    """`auto` (the GPU when there is one), `cpu`, `cuda` or `cuda:<index>`; `key` names the setting in errors.

    The one device rule of every command: a CUDA device always comes back with its index (the current
    device where `spec` names none), because `torch.cuda.set_device` rejects an index-less one.
    """
    try:
        device = torch.device("cuda" if spec == "auto" and torch.cuda.is_available() else
                              "cpu" if spec == "auto" else spec)
    except RuntimeError:
        raise CrammingError(f"{key}={spec!r} is not auto, cpu, cuda or cuda:<index>") from None
    if device.type not in ("cpu", "cuda"):
        raise CrammingError(f"{key}={spec!r} is not auto, cpu, cuda or cuda:<index>")
    if device.type == "cpu":
        return device
    if not torch.cuda.is_available():
        raise CrammingError(f"{key}={spec} but no CUDA GPU is available")
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise CrammingError(f"{key}={spec} but this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                            f"numbered from 0")
    return torch.device("cuda", index)


def prepare_device(device: torch.device) -> None:
    """Process-wide math settings for fast steps: no denormals on the CPU (they made steps 7x slower),
    TF32 tensor cores for fp32 matmuls on the GPU. An index-less CUDA device means the current one."""
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    else:
        torch.cuda.set_device(torch.cuda.current_device() if device.index is None else device.index)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool):
    """Within it, a run repeats bit for bit on the same machine: deterministic kernels (an error where an op
    has none), cuBLAS's fixed workspace and the math attention backend (the fused kernels' backward
    passes are not deterministic). The previous settings come back afterwards."""
    if not enabled:
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
              torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
              torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cudnn.benchmark)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # read when cuBLAS starts: set before any GPU matmul
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        algorithms, workspace, flash, efficient, cudnn_sdp, benchmark = before
        torch.use_deterministic_algorithms(algorithms)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace
        torch.backends.cuda.enable_flash_sdp(flash)
        torch.backends.cuda.enable_mem_efficient_sdp(efficient)
        torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)
        torch.backends.cudnn.benchmark = benchmark


# --- precision ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Precision:
    """fp32, or bf16/fp16 autocast on the GPU; fp16 with a loss scaler (its range is too small without)."""

    name: str  # fp32 | bf16 | fp16
    device_type: str  # cpu | cuda

    @classmethod
    def resolve(cls, name: str, device: torch.device, key: str) -> "Precision":
        """`auto` means bf16 on GPUs that have it, else fp16; fp32 on the CPU."""
        if name == "auto":
            name = "fp32" if device.type == "cpu" else "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if name not in DTYPES:
            raise CrammingError(f"{key}={name!r} must be auto, {', '.join(DTYPES)}")
        return cls(name, device.type)

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    def autocast(self):
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A pass-through scaler unless fp16: call scale/unscale_/step/update the same way in every precision."""
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")


# --- optimizer ------------------------------------------------------------------------------------


def build_optimizer(model: nn.Module, *, lr: float, betas, eps: float, weight_decay: float,
                    decay_embeddings: bool = True, fused: bool = True) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (split by tensor rank), never on norms, biases or scalars;
    `decay_embeddings=False` exempts embedding tables too.

    fused: torch's fused kernel (CPU and CUDA), faster than the foreach implementation in our benchmark.
    """
    groups = parameter_groups(model, weight_decay, decay_embeddings)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused, foreach=not fused)


def recipe_adamw(model: nn.Module, *, fused: bool = True) -> torch.optim.AdamW:
    """The crammed recipe's AdamW, its values read from configs/optim/adamw.yaml (the file pretraining's
    defaults come from), for the steps that time the recipe: the benchmark and the calculator."""
    values = OmegaConf.load(CONFIG_DIR / "optim" / "adamw.yaml")
    return build_optimizer(model, lr=values.lr, betas=values.betas, eps=values.eps,
                           weight_decay=values.weight_decay, fused=fused)


def parameter_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = True) -> list[dict]:
    """Two parameter groups: matrices with `weight_decay`, and norms, biases, scalars (and embedding tables
    unless `decay_embeddings`) without."""
    embeddings = set() if decay_embeddings else {
        id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    parameters = [p for p in model.parameters() if p.requires_grad]
    decayed = [p for p in parameters if p.dim() >= 2 and id(p) not in embeddings]
    exempt = [p for p in parameters if p.dim() < 2 or id(p) in embeddings]
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):  # torchao's low-bit optimizers keep it a tensor (their compiled step reads it)
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


# --- schedules: functions of the progress fraction f in [0, 1] -------------------------------------


def check_lr_schedule(schedule: str, key: str = "train.lr_schedule") -> None:
    if schedule not in LR_SCHEDULES:
        raise CrammingError(f"{key}={schedule!r} is unknown; choose one of {', '.join(LR_SCHEDULES)}")


def lr_multiplier(schedule: str, fraction: float, warmup_fraction: float = 0.1) -> float:
    """The learning rate's multiplier at progress f, a function of f alone.

    Pretraining drives f by the elapsed fraction of the time budget (or of max_steps), so a faster GPU
    simply sees more steps of the same schedule; GLUE drives it by optimizer steps. w = warmup_fraction.
    triangle (the crammed recipe): min(0.25 + f, 4 - 4f), peak at f = 0.75, zero at f = 1;
    constant; linear: 1 - f; cosine: linear warm-up over w, then cosine decay to zero;
    wsd (warm-up, stable, decay): linear warm-up over w, constant, linear decay to zero over the last
    WSD_DECAY_FRACTION; one-cycle (torch's OneCycleLR, cosine annealing): from 1/25 up to 1 at f = w, then
    down to 1/25e4 at f = 1; inverse-sqrt (the Transformer's): linear warm-up over w, then sqrt(w / f).
    """
    check_lr_schedule(schedule)
    f = min(max(fraction, 0.0), 1.0)
    if schedule == "triangle":
        return max(0.0, min(0.25 + f, 4.0 - 4.0 * f))
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return 1.0 - f
    if schedule == "one-cycle":
        if f < warmup_fraction:
            return _cosine_between(ONE_CYCLE_START, 1.0, f / warmup_fraction)
        return _cosine_between(1.0, ONE_CYCLE_END, (f - warmup_fraction) / (1.0 - warmup_fraction))
    if f < warmup_fraction or warmup_fraction >= 1.0:
        return f / warmup_fraction
    if schedule == "wsd":
        return min(1.0, (1.0 - f) / WSD_DECAY_FRACTION)
    if schedule == "inverse-sqrt":
        return math.sqrt(warmup_fraction / f) if f > 0 else 1.0
    return _cosine_between(1.0, 0.0, (f - warmup_fraction) / (1.0 - warmup_fraction))


def _cosine_between(start: float, end: float, t: float) -> float:
    """From start at t = 0 to end at t = 1 along half a cosine."""
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * t))


def target_batch_size(fraction: float, microbatch: int, batch_size: int, ramp_fraction: float) -> float:
    """Sequences per optimizer step: linear from one microbatch at f = 0 to batch_size at ramp_fraction."""
    if ramp_fraction <= 0.0 or fraction >= ramp_fraction:
        return float(batch_size)
    return microbatch + (batch_size - microbatch) * max(fraction, 0.0) / ramp_fraction


def accumulation_steps(fraction: float, sequences_per_microbatch: int, batch_size: int, ramp_fraction: float) -> int:
    """Microbatches (across all ranks) to accumulate for the next optimizer step."""
    target = target_batch_size(fraction, sequences_per_microbatch, batch_size, ramp_fraction)
    return max(1, round(target / sequences_per_microbatch))
