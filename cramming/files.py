"""Rewriting a file that holds results without ever leaving it empty or half-written, and reading one back
without trusting it blindly.

A plain `Path.write_text` truncates first: a kill (SIGKILL, power loss) between the truncation and the last
write loses the file's old content and its new one. Here the new content goes to a temporary file beside
it, reaches the disk (fsync), and only then takes the file's name (an atomic rename on POSIX).

A name a user gives that becomes a folder (a run's name, a dataset's, a sweep's run labels) is one safe path
component (`folder_name`): it never leaves the directory it is meant for.
"""

import json
import os
import re
from pathlib import Path

from cramming.errors import CrammingError


NAME_CHARACTERS = "ASCII letters, digits and . _ - +"
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}")


def folder_name(key: str, value, folder: str) -> tuple[bool, str]:
    """A `require` rule: `value`, which names the folder `folder`, is one path component that stays where
    it is put: 1 to 128 of NAME_CHARACTERS, not starting with a dot (no `..`, `/`, newline, hidden name)."""
    ok = isinstance(value, str) and _FOLDER_NAME.fullmatch(value) is not None
    return ok, (f"{key}={value!r} names the folder {folder}: it must be 1 to 128 of the {NAME_CHARACTERS}, "
                "not starting with a dot")


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
    except OSError as error:  # named after the file the user knows, not the temporary one
        tmp.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power loss
    finally:
        os.close(directory)


def read_json_object(path: Path) -> dict:
    """A JSON object this project wrote, read back: one truncated, corrupted or replaced by another kind of
    value is a CrammingError naming the file, never a traceback or a silently wrong reading."""
    try:
        value = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CrammingError(f"{path} is corrupt ({error}): it was truncated or changed") from None
    if not isinstance(value, dict):
        raise CrammingError(f"{path} holds a JSON {type(value).__name__}, not an object: it was changed or damaged")
    return value
