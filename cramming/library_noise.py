"""Library lines that bury our own: torchao's warnings that say nothing on a machine without CUDA, filtered
from the start, and transformers' loading report where we say the same in one line.

transformers imports torchao whenever it is installed (every GLUE, export and benchmark command), and on
import torchao tries to load its CUDA kernel libraries, looks for Triton (a GPU compiler) and registers its
enums with torch's pytree, which torch 2.13 answers with a deprecation warning. Without CUDA each of those
is a warning line on stderr; with CUDA a library that fails to load or a missing Triton is a real problem,
so only CPU builds of torch drop them. The build is read from the installed package's version label
(`2.13.0+cpu`): no torch import and no CUDA query when the package is imported.
"""

import contextlib
import logging
from importlib.metadata import PackageNotFoundError, version


class _Drop(logging.Filter):
    def __init__(self, *fragments: str):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        return not all(fragment in record.getMessage() for fragment in self.fragments)


def quiet_torchao_without_cuda() -> None:
    try:
        cpu_build = version("torch").endswith("+cpu")
    except PackageNotFoundError:
        return
    if not cpu_build:
        return
    logging.getLogger("torchao").addFilter(_Drop("Failed to load", ".so"))
    # a logger's filter sees only its own records, not its children's
    logging.getLogger("torchao.kernel.intmm").addFilter(_Drop("Detected no triton"))
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
