"""The precision policy a step runs under: its number format, autocast, and the loss scaler fp16 needs."""

import contextlib
from dataclasses import dataclass

import torch

from cramming.errors import CrammingError
from cramming.engine.hardware import DTYPES


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
