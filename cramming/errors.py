"""User-facing errors: bad input or bad config ends in one line, never a traceback."""

import functools
import sys

from omegaconf.errors import MissingMandatoryValue


class CrammingError(Exception):
    """A problem the user can fix (a missing file, a bad setting); printed as one line."""


def exit_on_user_error(task):
    """Wrap a Hydra task so a CrammingError, or a required key left unset, prints one line and exits with 2."""

    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except CrammingError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)
        except MissingMandatoryValue as error:
            print(f"error: {error.full_key} is required: add {error.full_key}=... to the command", file=sys.stderr)
            sys.exit(2)

    return wrapper
