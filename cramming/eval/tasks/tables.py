"""A task's table files: a header row naming the columns, then one example a row.

Two dialects, by the file's suffix. `.tsv` as GLUE writes it: lines split on "\\n" only, fields on tabs
only, quotes plain characters (MNLI and QNLI hold unbalanced ones), so every file yields exactly its
official number of rows. `.csv` with quoted fields, as spreadsheets, pandas and SWAG's files write it (a
field may hold commas, quotes and line breaks). A row with the wrong number of fields, or one its task cannot
read (a label outside its set), is malformed: up to floor(eval.max_malformed_fraction * rows) are skipped and
counted, more stop the run at the first of them.
"""

import csv
import logging
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from cramming.errors import CrammingError

log = logging.getLogger(__name__)


class Malformed(ValueError):
    """A row its task cannot read; the message says why, e.g. `label 'x' is not 0 or 1`."""


def not_utf8(path: Path) -> CrammingError:
    """The one line for a file that is not UTF-8: the line and the byte offset of its first bad byte. The bytes
    are decoded again, whole, since a text file's decoder counts offsets from the chunk it was reading."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        return CrammingError(f"{path}, line {line}: not valid UTF-8 ({error.reason} at byte {error.start})")
    return CrammingError(f"{path}: not valid UTF-8")  # it decodes now: the file changed since it was read


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its line ending); splits on "\\n" only, drops a UTF-8 BOM."""
    with open(path, encoding="utf-8-sig", newline="\n") as file:
        try:
            for number, line in enumerate(file, start=1):
                yield number, line.removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise not_utf8(path) from None


def _rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line the row starts on, its fields) of every row, the header's included."""
    if path.suffix != ".csv":
        for number, line in lines(path):
            yield number, line.split("\t")
        return
    with open(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file)
        start = 1
        try:
            for fields in reader:
                yield start, fields
                start = reader.line_num + 1  # a quoted field may span lines
        except csv.Error as error:
            raise CrammingError(f"{path}, line {reader.line_num}: not readable as CSV ({error})") from None
        except UnicodeDecodeError:
            raise not_utf8(path) from None


def read_table(path: Path, columns: Sequence[str], parse: Callable[[dict[str, str]], Any],
               max_malformed_fraction: float, implied_header: Optional[Sequence[str]] = None) -> tuple[list, list[int]]:
    """`parse(row)` of every row of a table file, `row` mapping each of `columns` to its field, and the first
    lines of the malformed rows skipped. `parse` raises Malformed for a row it cannot read. `implied_header`
    names the columns of a file without a header row (CoLA's)."""
    examples, malformed, first_problem = [], [], ""
    header, read_any = implied_header, False
    position = None if header is None else {name: header.index(name) for name in columns}
    separated = "comma-separated" if path.suffix == ".csv" else "tab-separated"
    for number, fields in _rows(path):
        read_any = True
        if header is None:
            header = tuple(fields)
            absent = [name for name in columns if name not in header]
            if absent:
                raise CrammingError(f"{path}, line 1: the header lacks the column(s) {', '.join(absent)}")
            position = {name: header.index(name) for name in columns}
            continue
        try:
            if len(fields) != len(header):
                raise Malformed(f"expected {len(header)} {separated} fields, found {len(fields)}")
            examples.append(parse({name: fields[index] for name, index in position.items()}))
        except Malformed as problem:
            malformed.append(number)
            first_problem = first_problem or f"{path}, line {number}: {problem}"

    if not examples and not malformed:
        raise CrammingError(f"{path}: no examples ({'only a header' if read_any else 'an empty file'})")
    tolerate(path, len(examples), malformed, first_problem, max_malformed_fraction)
    return examples, malformed


def tolerate(path: Path, good: int, malformed: list[int], first_problem: str, max_malformed_fraction: float) -> None:
    """The malformed-row rule for every file format of the tasks (tables, JSON lines, RACE's files): up to
    floor(max_malformed_fraction * rows) malformed rows are skipped with a warning; more are an error that
    names the first (`first_problem`: "<file>, line <n>: <why>")."""
    rows = good + len(malformed)
    tolerated = int(max_malformed_fraction * rows)
    if len(malformed) > tolerated:
        raise CrammingError(f"{first_problem} ({len(malformed)} malformed of {rows} rows, at most {tolerated} "
                            f"tolerated by eval.max_malformed_fraction={max_malformed_fraction})")
    if malformed:
        log.warning("%s: skipped %d malformed rows (first: %s)", path, len(malformed), first_problem)


def read_unlabelled(path: Path, id_columns: Sequence[str], columns: Sequence[str]) -> tuple[list[str], list[dict]]:
    """A test file of the classic layout: its header names an id column (the first of `id_columns` it has)
    and `columns`; every row must be whole, since each needs a prediction. The ids, and each row's `columns`."""
    rows = list(lines(path))
    if not rows:
        raise CrammingError(f"{path}: empty file")
    header = rows[0][1].split("\t")
    id_column = next((name for name in id_columns if name in header), None)
    if id_column is None or any(name not in header for name in columns):
        raise CrammingError(f"{path}, line 1: the header needs an id column ({'/'.join(id_columns)}) and "
                            f"{', '.join(columns)}")
    ids, examples = [], []
    for number, line in rows[1:]:
        fields = line.split("\t")
        if len(fields) != len(header):
            raise CrammingError(f"{path}, line {number}: expected {len(header)} tab-separated fields, found "
                                f"{len(fields)} (every test row needs a prediction, none may be skipped)")
        ids.append(fields[header.index(id_column)])
        examples.append({name: fields[header.index(name)] for name in columns})
    if not ids:
        raise CrammingError(f"{path}: no examples (only a header)")
    return ids, examples
