"""Host syncs in a training step: each makes the CPU wait for the GPU, which then idles while Python
launches the next kernels. A step should have none (read losses and flags every N steps instead).

On a GPU, CUDA's own sync debug mode sees every synchronizing call. Without one, a dispatch mode sees the
operators that force one on a GPU: a tensor read as a Python number or truth value (`.item()`, `float()`,
`if t:`: aten::_local_scalar_dense), `nonzero`, `masked_select`, `unique` and boolean-mask indexing (their
output's shape depends on the data); and, through a function mode, the reads that never reach the
dispatcher (`.tolist()`, `.numpy()`). It sees eager operators only: what a compiled graph runs inside its
kernels passes unseen, which is why the CPU count is taken on an eager model.
"""

import warnings
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
SYNCING = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
           aten._unique2.default, aten.unique_consecutive.default, aten.is_nonzero.default}


class HostSyncError(RuntimeError):
    """A host sync where none may be (raised by `no_host_sync`)."""


def _syncs(func, args) -> bool:
    if func in SYNCING:
        return True
    if func is aten.index.Tensor:  # x[mask]: the result's length is the mask's count
        return any(index is not None and index.dtype == torch.bool for index in args[1])
    return False


class HostSyncCounter(TorchDispatchMode):
    """Counts, per operator, the calls inside it that would make the host wait for the device."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.fail, self.syncs = fail, Counter()
        self.reads = _TensorReads(self)

    def __enter__(self):
        self.reads.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.reads.__exit__(*exc)

    def saw(self, name: str) -> None:
        if self.fail:
            raise HostSyncError(f"{name} makes the host wait for the device")
        self.syncs[name] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _syncs(func, args):
            self.saw(str(func))
        return func(*args, **(kwargs or {}))


class _TensorReads(TorchFunctionMode):
    """Tensor.tolist and Tensor.numpy copy a tensor's values into Python without an aten operator the
    dispatch mode could see; on a GPU they wait for it like .item()."""

    READS = {torch.Tensor.tolist: "Tensor.tolist", torch.Tensor.numpy: "Tensor.numpy"}

    def __init__(self, counter: HostSyncCounter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            self.counter.saw(self.READS[func])
        return func(*args, **(kwargs or {}))


def no_host_sync() -> HostSyncCounter:
    """A guard: the first syncing operator inside it raises HostSyncError (tests of the step's hot path)."""
    return HostSyncCounter(fail=True)


def count_host_syncs(run, device: torch.device) -> int:
    """Host syncs of one call of `run`: CUDA's sync debug mode on a GPU, the dispatch counter elsewhere."""
    if device.type != "cuda":
        with HostSyncCounter() as counter:
            run()
        return sum(counter.syncs.values())
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
            torch.cuda.synchronize()
    finally:
        torch.cuda.set_sync_debug_mode(before)
    return sum("synchroniz" in str(warning.message) for warning in caught)
