"""Library lines that bury our own: torchao's warnings that say nothing on this machine, filtered from the
start, and transformers' loading report where we say the same in one line.

transformers imports torchao whenever it is installed (every GLUE, export and benchmark command, and any
pipeline), and on import torchao tries to load its kernel libraries, looks for Triton (a GPU compiler) and
registers its enums with torch's pytree. Three kinds of line come of it, each dropped only where it is noise:
- "Failed to load <library>.so": without CUDA (a CPU build of torch, or a CUDA build on a machine without a GPU)
  its CUDA kernels cannot load anyway, and a library built for another Python (torchao ships `_C_mxfp8` for
  CPython 3.10 only) never can; a library of this Python that fails where CUDA works is a real problem, kept.
- "Detected no triton": kept where CUDA works, for the same reason.
- torch's deprecation of `register_constant()` on Enum subclasses: torchao's call, nothing a user can act on.
Whether CUDA works is asked when such a line comes, so importing the package imports no torch and queries no
device.
"""

import contextlib
import functools
import logging
import re
import sys

# a compiled module's CPython tag, as in `_C_mxfp8.cpython-310-x86_64-linux-gnu.so`
CPYTHON_TAG = re.compile(r"\.(cpython-\d+)[-.]")
THIS_PYTHON = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"


class _Drop(logging.Filter):
    def __init__(self, *fragments: str, when=lambda message: True):
        super().__init__()
        self.fragments, self.when = fragments, when

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (all(fragment in message for fragment in self.fragments) and self.when(message))


@functools.cache
def _without_cuda() -> bool:
    torch = sys.modules.get("torch")  # imported by torchao before it logs
    return torch is None or not torch.cuda.is_available()


def _never_loads_here(message: str) -> bool:
    """A kernel library that cannot load on this machine: no CUDA, or built for another Python."""
    tag = CPYTHON_TAG.search(message.split(":")[0])
    return _without_cuda() or (tag is not None and tag.group(1) != THIS_PYTHON)


def quiet_torchao() -> None:
    logging.getLogger("torchao").addFilter(_Drop("Failed to load", ".so", when=_never_loads_here))
    # a logger's filter sees only its own records, not its children's
    logging.getLogger("torchao.kernel.intmm").addFilter(_Drop("Detected no triton", when=lambda _: _without_cuda()))
    logging.getLogger("torch.utils._pytree").addFilter(_Drop("is an Enum subclass", "register_constant()"))


@contextlib.contextmanager
def without_load_report():
    """transformers' table of missing and resized weights (a fresh classification head, every time), dropped
    while a caller that reports the head in its own line loads a model."""
    logger, drop = logging.getLogger("transformers.modeling_utils"), _Drop("LOAD REPORT")
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
