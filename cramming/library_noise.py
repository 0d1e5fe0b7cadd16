"""Warnings of torchao's that say nothing on a machine without CUDA, filtered from the start.

transformers imports torchao whenever it is installed (every GLUE, export and benchmark command), and on
import torchao tries to load its CUDA kernel libraries and registers its enums with torch's pytree, which
torch 2.13 answers with a deprecation warning. Without CUDA each of those is a warning line on stderr that
buries our own output; with CUDA a library that fails to load is a real problem, so only CPU builds of
torch drop them. The build is read from the installed package's version label (`2.13.0+cpu`): no torch
import and no CUDA query when the package is imported.
"""

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
    logging.getLogger("torch.utils._pytree").addFilter(_Drop("is an Enum subclass", "register_constant()"))
