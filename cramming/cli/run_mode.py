"""Hydra's run mode read from the command line instead of from a whole composition.

Before it runs an app, Hydra composes the entire config once only to read `hydra.mode` (Hydra.get_mode), then
composes it again to run: a third of the compositions of a command's start (about 0.35 s of pretrain.py's on a
CPU core) spent on a value none of our configs set (tests/test_hydra_flags.py checks that it is None in each).
With no config setting it, that composition can only answer what the command line says: `hydra.mode=RUN` or
`hydra.mode=MULTIRUN` when given, otherwise None, which leaves the choice to -m as Hydra does."""

import contextlib
from collections.abc import Iterator

from hydra._internal.hydra import Hydra
from hydra.types import RunMode

from cramming.cli.arguments import parse_override
from cramming.errors import CrammingError


def mode_of(overrides: list[str]) -> RunMode | None:
    """What Hydra.get_mode composes for our configs: the last `hydra.mode=` override's mode, read by Hydra's own
    override grammar (quoted too); None without one, or where an override or the value does not parse, as
    Hydra.get_mode answers when its composition fails (the run's composition then says why)."""
    try:
        parsed = [parse_override(override) for override in overrides]
    except CrammingError:
        return None
    given = [override.value() for override in parsed if override.key_or_group == "hydra.mode"]
    return RunMode.__members__.get(given[-1]) if given and isinstance(given[-1], str) else None


@contextlib.contextmanager
def mode_from_the_command_line() -> Iterator[None]:
    """Within it, Hydra.get_mode reads the overrides (mode_of) instead of composing the config."""
    composing = Hydra.get_mode
    Hydra.get_mode = lambda hydra, config_name, overrides: mode_of(overrides)
    try:
        yield
    finally:
        Hydra.get_mode = composing
