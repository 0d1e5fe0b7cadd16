"""The commands: each module is one entry point (`python pretrain.py`, `cramming-pretrain`, ...) and holds
only its wiring; the work is done in the library. `hydra_command` gives every Hydra command the same
front: glob overrides quoted, the command line read as Hydra reads it (its flags keep their meaning), each
job's overrides checked (one line naming a bad key, choice or value), then Hydra, with `exit_on_user_error`
as the one error boundary; a group choice that replaces the config's own (quickstart's train=quick) is
shown with the keys it changes."""

import functools
import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from cramming import CHOOSING_KEYS, CONFIG_DIR, as_group_choices, compose_config
from cramming.cli.arguments import job_overrides, parse_arguments
from cramming.cli.groups import config_groups, replaced_choices
from cramming.cli.overrides import check_overrides
from cramming.cli.run_mode import mode_from_the_command_line
from cramming.errors import USER_ERRORS, exit_on_user_error, fail, user_error_line

PATH_KEYS = ("data.files",)
log = logging.getLogger(__name__)


def quote_path_overrides(argv: list[str] | None = None, keys: tuple[str, ...] = PATH_KEYS) -> None:
    """Quote glob patterns in path overrides so Hydra's grammar accepts them.

    The shell strips the quotes of `data.files='shards/train-00[01].txt.gz'`; Hydra would then read
    `[01]` as a list and reject the override. A value that already is a list (`[a,b]`) or quoted is kept.
    """
    argv = sys.argv if argv is None else argv
    for index, argument in enumerate(argv):
        key, sep, value = argument.partition("=")
        if sep and key.lstrip("+~") in keys and value and value[0] not in "'\"[":
            argv[index] = f"{key}='{value}'" if "'" not in value else f'{key}="{value}"'


def quote_home_overrides(argv: list[str]) -> None:
    """Quote a value that starts with `~` (`output_dir=~/runs` as a quoted shell word leaves it): Hydra's grammar
    rejects it bare. expand_home then expands it."""
    for index, argument in enumerate(argv):
        key, sep, value = argument.partition("=")
        if sep and not key.startswith("-") and value.startswith("~") and "'" not in value:
            argv[index] = f"{key}='{value}'"


def expand_home(cfg) -> None:
    """Every value of `cfg` that starts with `~` (a path given with a home folder, in a list too), expanded once
    here, so that the checks and the run read the same path (interpolations are left to what reads them)."""
    def expand(node) -> None:
        for key in list(node.keys()) if OmegaConf.is_dict(node) else range(len(node)):
            child = node._get_node(key)
            if OmegaConf.is_config(child):
                expand(child)
            elif isinstance(child._value(), str) and child._value().startswith("~") and not child._is_interpolation():
                node[key] = os.path.expanduser(child._value())

    expand(cfg)


def check_arguments(argv: list[str], config_name: str, schema: type, directories: tuple[str, ...] = (),
                    check_job=None) -> None:
    """Every job the command line asks for, checked before the first one starts (a sweep's bad value
    fails at once, not after hours of the jobs before it): its overrides, and in a sweep (-m) the job's
    whole config by `check_job(cfg, overrides, config_name)`, which the command runs itself on a single job."""
    arguments = parse_arguments(argv, config_name)
    if not arguments.composes:
        return
    for overrides in job_overrides(arguments):
        check_overrides(arguments.config_name, overrides, schema, directories)
        if check_job is not None and arguments.multirun:
            cfg = compose_config(arguments.config_name, overrides)
            expand_home(cfg)
            check_job(cfg, overrides, arguments.config_name)


def fail_sweep(failed_jobs: list[str], jobs: int) -> None:
    """The sweep's last line: which of its jobs failed, and why (exit 2; each job ran)."""
    fail(f"{len(failed_jobs)} of the sweep's {jobs} jobs failed (each job ran): " + "; ".join(failed_jobs))


def sweep_job_dir() -> str | None:
    """In a multirun (-m), the job's own numbered directory (hydra.sweep.dir/<job number>); None otherwise."""
    hydra = HydraConfig.get()
    return hydra.runtime.output_dir if hydra.mode == RunMode.MULTIRUN else None


def hydra_command(config_name: str, schema: type, directories: tuple[str, ...] = (),
                  path_keys: tuple[str, ...] = PATH_KEYS, check_job=None):
    """Make `task(cfg)` a command: `main()` reads sys.argv like Hydra, after the checks above (the
    `directories` keys must name directories the command can create or write into; `check_job` checks each
    job of a sweep whole)."""

    def decorate(task):
        @functools.wraps(task)
        def shown_then_run(cfg) -> None:
            hydra_config = HydraConfig.get()
            expand_home(cfg)
            for notice in replaced_choices(hydra_config.job.config_name, list(hydra_config.overrides.task)):
                log.warning("%s", notice)
            if hydra_config.mode != RunMode.MULTIRUN:
                task(cfg)
                return
            jobs_run.append(hydra_config.job.num)
            try:  # a job's error is said and the sweep goes on (main() exits 2 after the last job); Ctrl-C and
                task(cfg)  # a signal (exit 130, 143) end the sweep
            except USER_ERRORS as error:
                message, code, label = user_error_line(error)
                if code != 2 or os.environ.get("CRAMMING_DEBUG"):
                    raise
                failed_jobs.append(f"job {hydra_config.job.num}: {message}")
                print(f"{label}: job {hydra_config.job.num} failed: " + " ".join(message.split()), file=sys.stderr)

        run = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)(
            exit_on_user_error(shown_then_run))
        jobs_run: list[int] = []
        failed_jobs: list[str] = []

        @functools.wraps(task)
        def main() -> None:
            quote_path_overrides(keys=path_keys)
            quote_home_overrides(sys.argv)
            if CHOOSING_KEYS and set(CHOOSING_KEYS.values()) & set(config_groups(config_name)):
                sys.argv[1:] = as_group_choices(sys.argv[1:])  # train.optim.name=lion: the group choice optim=lion
            exit_on_user_error(check_arguments)(sys.argv[1:], config_name, schema, directories, check_job)
            jobs_run.clear()
            failed_jobs.clear()
            with mode_from_the_command_line():  # one composition fewer (cramming.cli.run_mode)
                run()
            if failed_jobs:
                fail_sweep(failed_jobs, len(jobs_run))

        return main

    return decorate
