"""What a training technique is: one class in one file that declares everything about it, and acts through the
set-up events and the loop's named points (a Callback). The trainer, the config schema, the microbatch search,
the checkpointer and the benchmark ask the registry (techniques/__init__.py) and never name a technique.

A technique is a plug-in (cramming.plugins). Its section is the whole pretraining config: its keys live in
`train` or `impl`, and its rules may read `arch` and the optimizer too. Declared at class level, before any run
exists:
- `name`: its short name (`layer-drop`), which other techniques' `conflicts` and `benchmark.variants` use;
- `override`: the override that switches it on, as users type it (`train.layer_drop`), which names it in
  messages (its checkpointed state keeps the class's name, `state_key`);
- `settings`: the config keys it owns (`cramming.plugins.Setting`: where users set it, type, default),
  added to the schema;
- `arch_needs`: what it needs of the architecture (`decoder_bias: True`), filled in where the arch leaves the key
  null, so that one override switches it on;
- `switch` (and `switch_value`): the key that switches it on, from which `enabled(cfg)` follows;
- `check(cfg)` (its values, before any data), `conflicts` (another technique's name -> why);
- `check_on_device(cfg, run)`: what it needs of the device, the compiler, the precision, the world size, and
  `needs_cuda`: whether it does anything (or can run) without a CUDA GPU;
- `speed_notice(cfg, device)`: one line where it is measured slower than the default;
- `microbatch_key(cfg)`: what it changes in the memory of a step, for the microbatch cache's key;
- `nested_optimizer_states(state)`: the per-parameter state dicts inside an optimizer state it lays out its
  own way;
- `variant_overrides`: the overrides that switch it on in `benchmark.variants` (empty: not a benchmark variant).
"""

import functools
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from cramming.data.store import PreparedDataset
from cramming.data.stream import Microbatches
from cramming.plugins import Plugin
from cramming.train.callbacks import Callback


@dataclass(frozen=True)
class RunContext:
    """What a technique may check against or build from, once the run's settings are known."""

    device: torch.device
    compile: bool
    precision: str  # fp32 | bf16 | fp16
    world_size: int


class Technique(Plugin, Callback):
    """One technique; see the module docstring for what it declares. Instance level: the Callback points and the
    set-up events below, each a no-op by default."""

    override: str = ""  # the override that switches it on, as messages name it
    switch: str = ""  # the config key that switches it on (`train.z_loss.weight`)
    switch_value: Any = None  # on when `switch` holds this value (`train.sampling` = importance); None: when set
    arch_needs: dict[str, Any] = {}  # arch keys it needs, set where the arch leaves them null (fill_arch_needs)
    conflicts: dict[str, str] = {}  # another technique's name -> why the two do not combine
    variant_overrides: tuple[str, ...] = ()

    @property
    def state_key(self) -> str:
        """The class's name, as checkpoints have always keyed a technique's state."""
        return type(self).__name__

    @classmethod
    def enabled(cls, cfg) -> bool:
        """Whether the config switches it on: the value at `switch` is set (not 0, false, null or empty), or equals
        `switch_value` where one is declared."""
        value = functools.reduce(getattr, cls.switch.split("."), cfg)
        return bool(value) if cls.switch_value is None else value == cls.switch_value

    @classmethod
    def check(cls, cfg) -> None:
        """Its rules on the config, called for every technique whether enabled or not: CrammingError naming the first
        of its values out of its domain."""

    @staticmethod
    def check_inputs(cfg) -> None:
        """Raise CrammingError where what it reads from disk (a teacher, a ticket) does not fit this run: called, if
        enabled, at the start, before any data is prepared (so the run's own data may not exist yet)."""

    @staticmethod
    def check_on_device(cfg, run: RunContext) -> None:
        """Raise CrammingError where it cannot run with these settings (called first of all set-up, if enabled)."""

    @staticmethod
    def speed_notice(cfg, device: torch.device) -> str | None:
        """One line where this technique, enabled, is measured slower than the default on this device."""
        return None

    uses_torchao_kernels = False  # on a GPU, its speed depends on torchao's compiled kernels being loaded
    needs_cuda = False  # it does nothing, or cannot run, without a CUDA GPU

    @staticmethod
    def microbatch_key(cfg) -> dict:
        """What it changes in a step's memory, for the microbatch cache's key (empty: nothing)."""
        return {}

    @staticmethod
    def nested_optimizer_states(optimizer_state: dict) -> list[dict] | None:
        """The plain optimizer state dicts inside a state dict it lays out its own way (None: not its layout)."""
        return None

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Technique":
        raise NotImplementedError

    def on_data(self, dataset: PreparedDataset) -> None:
        """The prepared dataset, once it is ready: before the model is built."""

    def on_model(self, model: torch.nn.Module) -> None:
        """Model surgery, before the optimizer is built and before any weights are loaded into the model."""

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    def stream(self, microbatches: Microbatches, start: int) -> Iterator[dict] | None:
        """The microbatches from global microbatch `start` on, if this technique draws them (None: it does not)."""
        return None

    def extra_memory(self, model: torch.nn.Module) -> int:
        """Bytes of GPU memory this technique holds beside a plain step's, for the microbatch search."""
        return 0


def parameter_bytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """The bytes of a copy of the model's parameters (in `dtype`, else their own)."""
    size = torch.tensor([], dtype=dtype).element_size() if dtype else None
    return sum(p.numel() * (size or p.element_size()) for p in model.parameters())
