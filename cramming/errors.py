"""User-facing errors: bad input or bad config ends in one line, never a traceback.

Every command has one boundary, `exit_on_user_error`: a CrammingError (our checks), a required key left
unset, an operating-system error on a path (a file where a directory belongs, no permission, a full
disk, with the space left) or Ctrl-C becomes `error: <one line>` on stderr and a non-zero exit.
CRAMMING_DEBUG=1 shows the traceback instead.
"""

import errno
import functools
import os
import shutil
import sys
from pathlib import Path

from omegaconf.errors import MissingMandatoryValue


class CrammingError(Exception):
    """A problem the user can fix (a missing file, a bad setting); printed as one line."""

    exit_code = 2
    label = "error"  # the word that starts the line


class Problems(CrammingError):
    """Several problems found in one pass over a config: one line that numbers them all (`problems` holds each)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        several = len(self.problems) > 1
        super().__init__(f"{len(self.problems)} problems: " + "; ".join(f"({n}) {p}" for n, p in
                                                                         enumerate(self.problems, 1))
                         if several else self.problems[0])


def require(rules: list[tuple[bool, str]]) -> None:
    """Raise Problems with the message of every rule that does not hold: how each config part and each technique
    checks its values, before any work."""
    failed = [message for ok, message in rules if not ok]
    if failed:
        raise Problems(failed)


def problems_of(*checks) -> list[str]:
    """Run every check (a callable raising CrammingError), each after the others' problems: all they found."""
    found = []
    for check in checks:
        try:
            check()
        except Problems as error:
            found.extend(error.problems)
        except CrammingError as error:
            found.append(str(error))
    return list(dict.fromkeys(found))  # a problem two checks share, once


def raise_problems(problems: list[str]) -> None:
    if problems:
        raise Problems(problems)


def describe_os_error(error: OSError) -> str:
    """One line for an operating-system error; a full disk or quota also says how much space is left there."""
    where = f" {error.filename}" if error.filename else ""
    space = f" ({free_space(error.filename)})" if error.errno in DISK_FULL and error.filename else ""
    return f"cannot use{where}: {error.strerror or error}{space}"


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def free_space(path) -> str:
    """How much the filesystem holding `path` has left, as a phrase naming its nearest existing directory."""
    existing = next((p for p in (Path(path), *Path(path).parents) if p.is_dir()), Path("/"))
    try:
        usage = shutil.disk_usage(existing)
    except OSError:
        return f"free space on {existing} unknown"
    return f"{size_text(usage.free)} free of {size_text(usage.total)} in {existing}"


def size_text(count: float, unit: str = "B") -> str:
    """1536 -> '1.54 KB' (powers of 1000: B, KB, MB, GB, TB, PB, EB)."""
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(count) < 1000:
            return f"{count:.3g} {prefix}{unit}" if prefix else f"{count:g} {unit}"
        count /= 1000
    return f"{count:.3g} E{unit}"


def fail(message: str, exit_code: int = 2, label: str = "error"):
    """Print `<label>: <message>` as one line and exit."""
    print(f"{label}: " + " ".join(str(message).split()), file=sys.stderr)
    sys.exit(exit_code)


USER_ERRORS = (CrammingError, MissingMandatoryValue, OSError, KeyboardInterrupt)


def user_error_line(error: BaseException) -> tuple[str, int, str]:
    """(message, exit code, label) of one of USER_ERRORS, as the boundary prints it."""
    if isinstance(error, CrammingError):
        return str(error), error.exit_code, error.label
    if isinstance(error, MissingMandatoryValue):
        return f"{error.full_key} is required: add {error.full_key}=... to the command", 2, "error"
    if isinstance(error, OSError):
        return describe_os_error(error), 2, "error"
    return "stopped before it finished", 130, "interrupted"


def exit_on_user_error(task):
    """Wrap a command so a user's problem prints one line and exits non-zero (see the module docstring)."""

    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except USER_ERRORS as error:
            if os.environ.get("CRAMMING_DEBUG"):
                raise
            fail(*user_error_line(error))

    return wrapper
