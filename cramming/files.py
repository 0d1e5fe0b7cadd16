"""Rewriting a file that holds results without ever leaving it empty or half-written, and reading one back
without trusting it blindly.

A plain `Path.write_text` truncates first: a kill (SIGKILL, power loss) between the truncation and the last
write loses the file's old content and its new one. Here the new content goes to a temporary file beside
it, reaches the disk (fsync), and only then takes the file's name (an atomic rename on POSIX). A write that
fails (a full disk) removes its temporary file or folder and is reported as itself (`WriteFailed`, or the
OSError named after the file the user knows), and nothing more is written after it.

safetensors creates its weight files readable by their owner alone (0600), where every other file is 0666 less
the umask: `share_weights` gives a folder's weights the mode of the files beside them.

A name a user gives that becomes a folder (a run's name, a dataset's, a sweep's run labels) is one safe path
component (`folder_name`): it never leaves the directory it is meant for; a folder a command writes in is one it
can create or write into (`check_directory`).
"""

import functools
import json
import os
import re
import tempfile
from pathlib import Path

from cramming.errors import DISK_FULL, CrammingError, free_space


NAME_CHARACTERS = "ASCII letters, digits and . _ - +"
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}")


def folder_name(key: str, value, folder: str) -> tuple[bool, str]:
    """A `require` rule: `value`, which names the folder `folder`, is one path component that stays where
    it is put: 1 to 128 of NAME_CHARACTERS, not starting with a dot (no `..`, `/`, newline, hidden name)."""
    ok = isinstance(value, str) and _FOLDER_NAME.fullmatch(value) is not None
    return ok, (f"{key}={value!r} names the folder {folder}: it must be 1 to 128 of the {NAME_CHARACTERS}, "
                "not starting with a dot")


def check_directory(path: str, key: str) -> None:
    """A directory the command creates or writes into: not a file, and inside a directory it may write."""
    target = Path(os.path.expanduser(str(path))).absolute()
    existing = next(candidate for candidate in (target, *target.parents) if candidate.exists())
    if not existing.is_dir():
        raise CrammingError(f"{key}={path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CrammingError(f"{key}={path}: cannot write in {existing} (permission denied)")
    try:  # permissions are not the whole story: a read-only mount refuses even root
        os.rmdir(tempfile.mkdtemp(prefix=".cramming-write-check-", dir=existing))
    except OSError as error:
        raise CrammingError(f"{key}={path}: cannot write in {existing} ({error.strerror})") from None


class WriteFailed(CrammingError):
    """A write that failed (a full disk, a quota, an I/O error), its partial copy removed: the one line names
    it and the space left, and nothing more is written after it (no summary of a half-finished run)."""


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
        space = free_space(path.parent) if error.errno in DISK_FULL else None  # before the partial copy goes
        tmp.unlink(missing_ok=True)
        if space is not None:
            raise WriteFailed(f"cannot write {path}: {error.strerror} ({space}); its partial copy is "
                              "removed") from None
        raise OSError(error.errno, error.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power loss
    finally:
        os.close(directory)


@functools.cache
def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it: put back at once
    os.umask(mask)
    return mask


def share_weights(folder: Path) -> None:
    """The *.safetensors files in `folder` (a checkpoint, an export) get the mode any file created here gets,
    0666 less the umask (0644 under the usual 022), as their config.json and tokenizer files have: whoever may
    read a run's config may read its weights."""
    for path in Path(folder).glob("*.safetensors"):
        os.chmod(path, 0o666 & ~_umask())


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
