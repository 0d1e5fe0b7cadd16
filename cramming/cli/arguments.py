"""The command line read the way Hydra reads it, so that every flag Hydra documents (`--cfg job`, `-c all`,
`--resolve`, `--info`, `-m/--multirun`, `--config-name`, `--help`) keeps its meaning, and the overrides
that our checks see are exactly the ones Hydra will apply: one job's, or each job of a multirun sweep."""

import argparse
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from cramming.errors import CrammingError


@dataclass
class Arguments:
    config_name: str
    overrides: list[str]  # the task's overrides as typed (hydra.* ones are Hydra's own business)
    multirun: bool
    composes: bool  # False for --help, --hydra-help, --shell-completion: nothing is composed, nothing to check


def parse_arguments(argv: list[str], config_name: str) -> Arguments:
    """Hydra's own argument parser; a flag it refuses (`--cfg jobs`) is one line, like a bad override."""
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        raise CrammingError(f"{error}; see --help") from None
    if unknown:
        raise CrammingError(f"unrecognized arguments: {' '.join(unknown)}{_left_over(argv, unknown, args.overrides)}; "
                            "see --help")
    modes = [flag for flag, on in (("--run", args.run), ("--multirun", args.multirun), ("--cfg", args.cfg),
                                   ("--info", args.info), ("--shell-completion", args.shell_completion)) if on]
    if len(modes) > 1:  # Hydra's own ValueError, as one line
        raise CrammingError(f"{' and '.join(modes)} cannot go together: Hydra does one of --run, --multirun, "
                            "--cfg, --info, --shell-completion at a time")
    overrides = [o for o in args.overrides if not o.lstrip("+~").startswith("hydra.")]
    composes = not (args.help or args.hydra_help or args.shell_completion)
    return Arguments(args.config_name or config_name, overrides, args.multirun, composes)


def _left_over(argv: list[str], unknown: list[str], overrides: list[str]) -> str:
    """Why overrides were left unread: Hydra reads its overrides as one group, which a flag among them ends."""
    if unknown[0].startswith("-"):
        return ""
    flags = []
    for token in reversed(argv[:argv.index(unknown[0])]):
        if token in overrides:
            break
        if token.startswith("-"):
            flags.insert(0, token)
    named = " and ".join(flags)
    return (f": {named} comes after other overrides, and Hydra reads the overrides as one group: put {named} before "
            "the overrides or after them all") if flags else ""


def parse_override(override: str):
    try:
        return OverridesParser.create().parse_overrides([override])[0]
    except OverrideParseException as error:
        raise CrammingError(f"cannot read the override {override!r}: {str(error).splitlines()[0]}"
                            f"{_quoting_hint(override)}") from None


def _quoting_hint(override: str) -> str:
    """A list of overrides (scripts/ablate.py overrides=[...]) whose items lack their own quotes: the form Hydra
    reads."""
    key, _, value = override.partition("=")
    if not (value.startswith("[") and value.endswith("]")):
        return ""
    items, depth, start = [], 0, 1
    for position, character in enumerate(value[1:-1], 1):
        depth += {"[": 1, "]": -1}.get(character, 0)
        if character == "," and depth == 0:
            items.append(value[start:position])
            start = position + 1
    items.append(value[start:-1])
    if not all("=" in item and item[:1] not in "'\"" for item in items):
        return ""
    quoted = ",".join(f'"{item}"' for item in items)
    return f"; a list of overrides quotes each one: '{key}=[{quoted}]'"


def job_overrides(arguments: Arguments) -> list[list[str]]:
    """The override list of each job Hydra will run: one without -m; with -m, Hydra's basic sweeper's jobs
    (the cross product of the sweeps), in its order."""
    parsed = [parse_override(override) for override in arguments.overrides]
    sweeps = [override for override in parsed if override.is_sweep_override()]
    if not arguments.multirun:
        if sweeps:
            given = sweeps[0].input_line
            raise CrammingError(f"{given} is a sweep: add -m (--multirun) to run one job per value; for a list "
                                "write key=[a,b], for text with a comma quote it: key='a,b'")
        return [arguments.overrides]
    return [job for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for job in batch]
