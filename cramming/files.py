"""Rewriting a file that holds results without ever leaving it empty or half-written.

A plain `Path.write_text` truncates first: a kill (SIGKILL, power loss) between the truncation and the last
write loses the file's old content and its new one. Here the new content goes to a temporary file beside
it, reaches the disk (fsync), and only then takes the file's name (an atomic rename on POSIX).
"""

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace path's content with text: a reader (or a crash) sees the old file or the new one, never a mix."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power loss
    finally:
        os.close(directory)
