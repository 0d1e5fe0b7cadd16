"""The tasks `eval.tasks` can name: one line each. A new task is its own file plus its line here."""

import difflib

from cramming.errors import CrammingError
from cramming.eval.tasks.base import Task
from cramming.eval.tasks.copa import Copa
from cramming.eval.tasks.glue import GLUE_TASKS
from cramming.eval.tasks.local import LocalTask
from cramming.eval.tasks.multirc import MultiRC
from cramming.eval.tasks.race import Race
from cramming.eval.tasks.record import Record
from cramming.eval.tasks.superglue import PAIR_TASKS
from cramming.eval.tasks.swag import Swag

TASKS: dict[str, Task] = {task.name: task for task in (
    *GLUE_TASKS,  # cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli
    *PAIR_TASKS,  # SuperGLUE's boolq, cb, wic, wsc, axb, axg (its rte is GLUE's)
    Copa(),
    MultiRC(),
    Record(),
    Race(),
    Swag(),
    LocalTask(),
)}


def task_named(name: str) -> Task:
    """The registry's task of that name; an unknown one is an error listing the known ones."""
    if name not in TASKS:
        near = difflib.get_close_matches(name, list(TASKS), n=1)
        raise CrammingError(f"unknown GLUE task '{name}'; known tasks: {', '.join(TASKS)}"
                            f"{f' — did you mean {near[0]}?' if near else ''}")
    return TASKS[name]


def requested_tasks(cfg) -> list[Task]:
    """The tasks of cfg.tasks, in its order, each set up by cfg (a task's settings are checked, and rejected when
    set for a task cfg.tasks does not name)."""
    if not cfg.tasks:
        raise CrammingError("eval.tasks is empty")
    if len(set(cfg.tasks)) != len(cfg.tasks):
        raise CrammingError(f"eval.tasks lists a task twice: {cfg.tasks}")
    tasks = [task_named(name) for name in cfg.tasks]
    configured = {task.name: task.configured(cfg) for task in TASKS.values()}
    return [configured[task.name] for task in tasks]
