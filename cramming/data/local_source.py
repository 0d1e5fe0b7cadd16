"""data=local: text files (txt, txt.gz, jsonl, parquet) read through `datasets`' own streaming builders."""

import glob
import os
import stat
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from cramming.data.config import DataBaseConfig
from cramming.data.source_base import Document, Source, split_records
from cramming.errors import CrammingError, require
from cramming.plugins import Setting

# datasets builder for each supported file suffix (compression is handled by datasets itself)
BUILDERS = {
    ".txt": "text",
    ".txt.gz": "text",
    ".jsonl": "json",
    ".jsonl.gz": "json",
    ".json": "json",
    ".parquet": "parquet",
}
READ_BATCH_ROWS = 4096


def builder_for(path: str) -> str:
    for suffix, builder in BUILDERS.items():
        if path.endswith(suffix):
            return builder
    raise CrammingError(f"data.files: {path} has an unsupported type; use one of {', '.join(BUILDERS)}")


def resolve_files(patterns) -> list[str]:
    """Expand `data.files` (a path, a glob, or a list of them) into existing files, in the given order."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise CrammingError("data.files is empty: give a file, a glob, or a list of them")
    files: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        if glob.has_magic(pattern):
            matches = sorted(path for path in glob.glob(pattern, recursive=True) if not os.path.isdir(path))
            if not matches:
                raise CrammingError(f"data.files: {pattern!r} matches no files")
        elif os.path.isdir(pattern):
            raise CrammingError(f"data.files: {pattern} is a directory; give a glob such as {pattern}/*.txt")
        elif not os.path.exists(pattern):
            raise CrammingError(f"data.files: no such file: {pattern}")
        else:
            matches = [pattern]
        for path in matches:
            if not os.path.isfile(path):  # read as text, a FIFO waits for a writer and a device never ends
                raise CrammingError(f"data.files: {path} is {special_kind(path)}, not a regular file; give text "
                                    f"files ({', '.join(BUILDERS)})")
            builder_for(path)
            if path not in files:
                files.append(path)
    return files


def listed(files: list[str], shown: int = 3) -> str:
    """'a, b, c and 2 more': files named in a message."""
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return ", ".join(files[:shown]) + more


def special_kind(path: str) -> str:
    """What a path that is neither a regular file nor a directory is."""
    if not os.path.exists(path):
        return "a symbolic link to nothing"
    mode = os.stat(path).st_mode
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((kind for test, kind in kinds if test(mode)), "a special file")


DEFLATE_MAX_RATIO = 1032  # no deflate stream expands more than this: a larger trailer is a damaged file's


def text_size_bytes(path: str) -> int:
    """Uncompressed size of a file; for .gz the trailer's ISIZE (exact below 4 GiB; bounded by what deflate can
    expand to, as a truncated file's trailer is any 4 bytes), else the file size."""
    size = os.path.getsize(path)
    if path.endswith(".gz") and size >= 4:
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return min(struct.unpack("<I", handle.read(4))[0], DEFLATE_MAX_RATIO * size)
    return size


class LocalSource(Source):
    name = "local"
    settings = (Setting("data.files", Any),)  # a path or glob, or a list of them (.txt[.gz], .jsonl[.gz], .parquet)

    def __init__(self, cfg: DataBaseConfig, files: list[str]):
        super().__init__(cfg)
        self.files = files  # the local files read, in order

    @classmethod
    def check(cls, cfg: DataBaseConfig) -> None:
        if cfg.source == cls.name:
            require([(cfg.files not in (None, "???", "", []),
                      "data=local needs data.files=<a file, a glob, or a list of them>")])

    @classmethod
    def build(cls, cfg: DataBaseConfig) -> "LocalSource":
        return cls(cfg, resolve_files(cfg.files))

    @property
    def where(self) -> str:
        return f"data.files ({listed(self.files)})"

    def input_files(self) -> list[str]:
        return list(self.files)

    def fingerprint(self) -> dict:
        return {
            "files": [
                {"path": os.path.abspath(path), "bytes": os.path.getsize(path), "mtime_ns": os.stat(path).st_mtime_ns}
                for path in self.files
            ]
        }

    def total_bytes(self) -> int:
        return sum(text_size_bytes(path) for path in self.files)

    def documents(self) -> Iterator[Document]:
        for path in self.files:
            if os.path.getsize(path) == 0:
                continue  # an empty file holds no documents; the summary counts what was read
            yield from self._file_documents(path)

    def _file_documents(self, path: str) -> Iterator[Document]:
        import datasets  # noqa: PLC0415 -- seconds to import: only when a file is read

        builder = builder_for(path)
        options = {"encoding_errors": "replace"} if builder == "text" else {}
        try:
            stream = datasets.load_dataset(builder, data_files=[path], split="train", streaming=True, **options)
            batches = stream.iter(batch_size=READ_BATCH_ROWS)
            if builder == "text":
                yield from self._group_lines(batches)
            else:
                yield from split_records(batches, self.cfg.text_column, path)
        except CrammingError:
            raise
        except (OSError, EOFError, ValueError, zlib.error) as error:
            raise CrammingError(f"cannot read {path}: {type(error).__name__}: {error}") from None
        except Exception as error:  # pyarrow and the json reader raise their own error types
            if type(error).__module__.startswith(("pyarrow", "datasets", "json")):
                raise CrammingError(f"cannot read {path}: {type(error).__name__}: {error}") from None
            raise

    def _group_lines(self, batches) -> Iterator[Document]:
        """Lines → documents: one per line, or blank-line-separated paragraphs."""
        if self.cfg.sample_by == "line":
            for batch in batches:
                for line in batch["text"]:
                    if line and not line.isspace():
                        yield [line]
            return
        document: Document = []
        for batch in batches:
            for line in batch["text"]:
                if line and not line.isspace():
                    document.append(line)
                elif document:
                    yield document
                    document = []
        if document:
            yield document
