"""The tasks `eval.tasks` can name, one class each in the registry TASKS (cramming.plugins.Registry); the `eval`
section's schema, GlueConfig, which the registry composes from the keys every task shares and each task's own
settings (its `settings`, as `eval.local`); and the check of an eval config against them (every task's `check`).
A new task is its own file plus its entry here.
"""

import difflib
import functools
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cramming.errors import CrammingError, problems_of, raise_problems, require
from cramming.eval.config import GlueBaseConfig
from cramming.eval.tasks.base import Task
from cramming.eval.tasks.copa import Copa
from cramming.eval.tasks.glue import GLUE_TASKS
from cramming.eval.tasks.local import LocalTask
from cramming.eval.tasks.multirc import MultiRC
from cramming.eval.tasks.race import Race
from cramming.eval.tasks.record import Record
from cramming.eval.tasks.superglue import PAIR_TASKS
from cramming.eval.tasks.swag import Swag
from cramming.plugins import Registry

TASKS: Registry[type[Task]] = Registry("eval.tasks", (
    *GLUE_TASKS,  # cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli
    *PAIR_TASKS,  # SuperGLUE's boolq, cb, wic, wsc, axb, axg (its rte is GLUE's)
    Copa,
    MultiRC,
    Record,
    Race,
    Swag,
    LocalTask,
))
TASK_NAMES = TASKS.names


@dataclass
class GlueConfig(GlueBaseConfig):
    """The `eval` section: the keys every task shares (cramming.eval.config) and each task's own settings."""


GlueConfig = TASKS.schema(GlueConfig, "eval")
ConfigStore.instance().store(group="eval", name="schema", node=GlueConfig)


def as_glue_config(cfg: Any) -> GlueConfig:
    """A GlueConfig from a Hydra DictConfig (or a GlueConfig); unknown keys and bad types are errors."""
    if isinstance(cfg, GlueConfig):
        return cfg
    try:
        values = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GlueConfig), values))
    except OmegaConfBaseException as error:
        raise CrammingError(f"eval config: {str(error).splitlines()[0]}") from None


def task_named(name: str) -> type[Task]:
    """The registry's task class of that name; an unknown one is an error listing the known ones."""
    if name not in TASK_NAMES:
        near = difflib.get_close_matches(name, TASK_NAMES, n=1)
        raise CrammingError(f"unknown GLUE task '{name}'; known tasks: {', '.join(TASK_NAMES)}"
                            f"{f' — did you mean {near[0]}?' if near else ''}")
    return TASKS.by_name[name]


def requested_tasks(cfg: GlueConfig) -> list[Task]:
    """The tasks of cfg.tasks, in its order, each built from cfg after every task's rules held (a task's settings
    are checked, and refused when set for a task cfg.tasks does not name): every problem."""
    raise_problems(problems_of(
        lambda: require([(bool(cfg.tasks), "eval.tasks is empty"),
                         (len(set(cfg.tasks)) == len(cfg.tasks), f"eval.tasks lists a task twice: {cfg.tasks}")]),
        *[functools.partial(task_named, name) for name in cfg.tasks],
        lambda: TASKS.check(cfg)))
    return [task_named(name).build(cfg) for name in cfg.tasks]


def check_glue_config(cfg: GlueConfig) -> None:
    """Every problem of an eval config, before any work: its values (GlueConfig.check), then the task names and
    each task's own settings."""
    raise_problems(problems_of(cfg.check, lambda: requested_tasks(cfg)))
