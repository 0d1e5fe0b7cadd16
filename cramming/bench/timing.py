"""A training step of a model on a fixed synthetic batch, timed: forward, backward, the gradient norm (and
clipping), the non-finite check and the update.

The trainer's own step (cramming.engine.step.Step) with its precision policy and the recipe's AdamW
(cramming.engine.adamw), without data loading: what the benchmark compares, the calculator's speed fit measures
and its `check` verifies. With techniques (the benchmark's variants), the step they make of it.
"""

import itertools
import time
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils.flop_counter import FlopCounterMode

from cramming.data.mlm import synthetic_mlm_batch
from cramming.engine.adamw import recipe_adamw
from cramming.engine.device import prepare_device, resolve_device
from cramming.engine.precision import Precision
from cramming.engine.step import Step, StepState
from cramming.model import ModelConfig, build_mlm_model
from cramming.model.checkpoint import unwrap
from cramming.train.callbacks import CallbackList, step_points
from cramming.train.techniques import wrap_optimizer


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes a tensor holds; for a wrapper subclass (torchao's 8-bit optimizer states), its inner tensors'."""
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names)
    return tensor.numel() * tensor.element_size()


class TimedStep:
    """One model with its optimizer on one batch; `step()` runs a full training step and times it."""

    def __init__(self, model: torch.nn.Module, batch: dict, precision: Precision, device: torch.device, *,
                 grad_clip: float | None = None, fused_adamw: bool = True,
                 optimizer: torch.optim.Optimizer | None = None, techniques: list = ()):
        """model: as it runs (compiled or not); grad_clip: the max gradient norm (None: measured, not clipped, as
        the trainer does for its metrics); optimizer: None builds the recipe's AdamW over the model's parameters;
        techniques: built ones (cramming.train.techniques), which wrap the optimizer and act at the step's points,
        as in pretraining."""

        self.model = model.to(device).train()
        self.batch = {key: value.to(device) for key, value in batch.items()}
        self.precision, self.device, self.techniques = precision, device, list(techniques)
        plain = unwrap(self.model)
        self.optimizer = wrap_optimizer(self.techniques, optimizer or recipe_adamw(plain, fused=fused_adamw))
        self.scaler = precision.grad_scaler()
        self.state = StepState(model=plain, device=device)
        self.training_step = self._step(self.model, grad_clip)
        CallbackList(self.techniques).on_train_start(self.state)
        self.peak_bytes = 0  # on CUDA: this model's weights and optimizer state plus what its step allocates

    def resident_bytes(self) -> int:
        """This model's weights and optimizer state on its device (another model may share the device; an
        offloaded optimizer keeps its state elsewhere)."""
        tensors = list(self.model.parameters())
        for state in getattr(self.optimizer, "state", {}).values():
            tensors += [t for t in state.values() if torch.is_tensor(t)]
        return sum(tensor_bytes(t) for t in tensors if t.device == self.device)

    def run(self) -> None:
        """One training step, untimed: the trainer's step on one microbatch."""
        self.training_step.run(self.state)

    def _step(self, network: torch.nn.Module, grad_clip: float | None = None) -> Step:
        """The training step on this batch, the techniques acting at its points."""
        return Step(network, self.optimizer, self.scaler, self.precision, itertools.repeat(self.batch),
                    points=step_points(self.techniques), grad_clip=grad_clip)

    def executed_flops(self) -> float:
        """FLOPs the step's forward and backward passes execute (SAM's two), counted by torch's FlopCounterMode
        on the eager model (attention, the sparse head: what really runs; the optimizer's elementwise work not)."""

        model = self.state.model  # the counter sees eager operators only
        with FlopCounterMode(display=False) as counter:
            self._step(model).run(self.state, update=False)
        model.zero_grad(set_to_none=True)
        return float(counter.get_total_flops())

    def step(self) -> float:
        """Seconds of one training step, measured to the end of its GPU work."""
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before, resident = torch.cuda.memory_allocated(), self.resident_bytes()
        started = time.perf_counter()
        self.run()
        if cuda:
            torch.cuda.synchronize()
            self.peak_bytes = max(self.peak_bytes, resident + torch.cuda.max_memory_allocated() - before)
        return time.perf_counter() - started


@dataclass
class Timing:
    tokens_per_s: float
    steps: int
    seconds: float  # measured time, warm-up excluded


def time_training(arch: ModelConfig, batch: int, vocab_size: int, seq_length: int, mlm_rate: float, *,
                  device: str = "cpu", precision: str = "fp32", compile: bool = False, warmup_steps: int = 1,
                  min_steps: int = 3, min_seconds: float = 0.0) -> Timing:
    """Tokens/s of the trainer's step (clipping at 0.5 included) over at least `min_steps` steps and
    `min_seconds` seconds, after `warmup_steps` more; compiled as the trainer compiles, if asked."""
    device = resolve_device(device, "device")
    prepare_device(device)
    model = build_mlm_model(arch, vocab_size)
    if compile:
        torch.compiler.reset()  # each shape compiles afresh: after 8 shapes dynamo would run the rest eagerly
        model = torch.compile(model)
    step = TimedStep(model, synthetic_mlm_batch(batch, seq_length, vocab_size, mlm_rate),
                     Precision.resolve(precision, device, "precision"), device, grad_clip=0.5)
    for _ in range(warmup_steps):
        step.step()
    seconds, steps = 0.0, 0
    while steps < min_steps or seconds < min_seconds:
        seconds += step.step()
        steps += 1
    return Timing(tokens_per_s=steps * batch * seq_length / seconds, steps=steps, seconds=seconds)
