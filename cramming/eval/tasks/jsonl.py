"""A task's JSON-lines files (SuperGLUE's `{train,val,test}.jsonl`): one JSON object a line.

A line that is not a JSON object, lacks a field its task reads, or holds a value the task cannot read (a
label outside its set) is malformed under tables.py's rule: up to floor(eval.max_malformed_fraction * lines)
are skipped and counted, more stop the run at the first of them, naming the file, the line and the value.
"""

import json
from pathlib import Path
from typing import Any, Callable

from cramming.errors import CrammingError
from cramming.eval.tasks.tables import Malformed, lines, tolerate


def read_jsonl(path: Path, parse: Callable[[dict], list], max_malformed_fraction: float) -> tuple[list, list[int]]:
    """The examples `parse(record)` makes of every line's object (a list: MultiRC's and ReCoRD's lines hold
    many), and the lines of the malformed ones skipped. `parse` raises Malformed (or KeyError, TypeError on a
    missing or mistyped field) for a line it cannot read; blank lines are skipped."""
    examples, malformed, first_problem, read_any = [], [], "", False
    for number, line in lines(path):
        if not line.strip():
            continue
        read_any = True
        try:
            examples += parse(_object(line))
        except (Malformed, KeyError, TypeError) as problem:
            malformed.append(number)
            first_problem = first_problem or f"{path}, line {number}: {_why(problem)}"
    if not read_any:
        raise CrammingError(f"{path}: no examples (an empty file)")
    tolerate(path, len(examples), malformed, first_problem, max_malformed_fraction)
    return examples, malformed


def _object(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise Malformed(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise Malformed(f"not a JSON object: {line[:40]!r}")
    return record


def _why(problem: Exception) -> str:
    if isinstance(problem, KeyError):
        return f"no field {problem.args[0]!r}"
    return str(problem) if isinstance(problem, Malformed) else f"a field of the wrong type ({problem})"


def label_of(value: Any, labels: tuple) -> int:
    """The id of a file's label `value`: its position in `labels` (the official values, in the order of the
    hub's ids; JSON true is not 1 here). Malformed otherwise, naming the value and the allowed ones."""
    for index, label in enumerate(labels):
        if type(value) is type(label) and value == label:
            return index
    allowed = " or ".join(json.dumps(label) for label in labels)
    raise Malformed(f"label {json.dumps(value)} is not {allowed}")
