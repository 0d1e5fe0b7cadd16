"""Models built for their shapes alone, on the meta device: what the checks at a command's start need (sizes,
parameter names, a config against its weights) without allocating or initializing anything."""

import contextlib
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode

# What fills a tensor with values: torch.nn.init's initializers and the tensor methods they end in.
_FILLS = frozenset({*(getattr(torch.nn.init, name) for name in dir(torch.nn.init)
                      if name.endswith("_") and not name.startswith("_")),
                    torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.fill_, torch.Tensor.zero_})


class _NoFills(TorchFunctionMode):
    """Leaves meta tensors unfilled: they hold no values, and torch's meta kernel for a random fill imports
    torch._dynamo on its first call (2 s of a command's start that compiles nothing)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FILLS:
            tensor = args[0] if args else kwargs.get("tensor")  # torch.nn.init hands it on by keyword
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Modules built inside have meta tensors: the right shapes and dtypes, no storage, no initial values."""
    with torch.device("meta"), _NoFills():
        yield
