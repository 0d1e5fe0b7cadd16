"""Where raw text comes from: the embedded corpus, local files, or a hub dataset.

Every source yields documents as lists of lines: lines are what the tokenizer encodes (short strings
encode fastest), documents are what the filters judge and what [SEP] separates when packing.
"""

import glob
import hashlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from cramming.data.config import DataConfig
from cramming.errors import CrammingError

Document = list[str]

SOURCES = ("embedded", "local", "hub", "mixture")
SAMPLE_BY = ("line", "paragraph")
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


def embedded_documents() -> list[Document]:
    """The reference documentation bundled with every CPython (pydoc_data): English prose, no download."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise CrammingError("the embedded corpus needs the standard library's pydoc_data, missing here") from None
    return [topics[name].split("\n") for name in sorted(topics)]


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
            matches = sorted(path for path in glob.glob(pattern, recursive=True) if os.path.isfile(path))
            if not matches:
                raise CrammingError(f"data.files: {pattern!r} matches no files")
        elif os.path.isdir(pattern):
            raise CrammingError(f"data.files: {pattern} is a directory; give a glob such as {pattern}/*.txt")
        elif not os.path.isfile(pattern):
            raise CrammingError(f"data.files: no such file: {pattern}")
        else:
            matches = [pattern]
        for path in matches:
            builder_for(path)
            if path not in files:
                files.append(path)
    return files


def text_size_bytes(path: str) -> int:
    """Uncompressed size of a file; for .gz the trailer's ISIZE (exact below 4 GiB), else the file size."""
    if path.endswith(".gz"):
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return struct.unpack("<I", handle.read(4))[0]
    return os.path.getsize(path)


@dataclass
class Source:
    """A resolved data source: what to read, how big it is, and a fingerprint for the cache key."""

    cfg: DataConfig
    files: list[str]

    @classmethod
    def from_config(cls, cfg: DataConfig) -> "Source":
        """The source `cfg` names; for data=mixture a cramming.data.mixture.Mixture, which reads the same."""
        if cfg.source not in SOURCES:
            raise CrammingError(f"data.source={cfg.source!r} is unknown; choose one of {', '.join(SOURCES)}")
        if cfg.sample_by not in SAMPLE_BY:
            raise CrammingError(f"data.sample_by={cfg.sample_by!r} is unknown; choose one of {', '.join(SAMPLE_BY)}")
        if cfg.source == "hub" and not cfg.hub_path:
            raise CrammingError("data.source=hub needs data.hub_path (a dataset name on the hub)")
        if cfg.sources and cfg.source != "mixture":
            raise CrammingError(f"data.sources is set but data.source={cfg.source}: mixtures need data=mixture")
        if cfg.source == "mixture":
            from cramming.data.mixture import Mixture

            return Mixture.from_config(cfg)
        return cls(cfg, resolve_files(cfg.files) if cfg.source == "local" else [])

    def fingerprint(self) -> dict:
        """What identifies the raw text: content hash, file identities, or the hub coordinates."""
        if self.cfg.source == "embedded":
            digest = hashlib.sha256("\f".join("\n".join(doc) for doc in embedded_documents()).encode()).hexdigest()
            return {"embedded_sha256": digest}
        if self.cfg.source == "local":
            return {
                "files": [
                    {"path": os.path.abspath(path), "bytes": os.path.getsize(path), "mtime_ns": os.stat(path).st_mtime_ns}
                    for path in self.files
                ]
            }
        return {"hub": [self.cfg.hub_path, self.cfg.hub_name, self.cfg.split, self.cfg.text_column]}

    def total_bytes(self) -> int | None:
        """Uncompressed input size when it can be known up front (for the progress bar)."""
        if self.cfg.source == "local":
            return sum(text_size_bytes(path) for path in self.files)
        if self.cfg.source == "embedded":
            return sum(len(line) + 1 for doc in embedded_documents() for line in doc)
        return None

    def tagged_documents(self) -> Iterator[tuple[int, Document]]:
        """(index of the source, document): always source 0 here; a Mixture has several."""
        for document in self.documents():
            yield 0, document

    def documents(self) -> Iterator[Document]:
        if self.cfg.source == "embedded":
            yield from embedded_documents()
        elif self.cfg.source == "local":
            for path in self.files:
                if os.path.getsize(path) == 0:
                    continue  # an empty file holds no documents; the summary counts what was read
                yield from self._file_documents(path)
        else:
            yield from self._hub_documents()

    def _file_documents(self, path: str) -> Iterator[Document]:
        import datasets

        builder = builder_for(path)
        options = {"encoding_errors": "replace"} if builder == "text" else {}
        try:
            stream = datasets.load_dataset(builder, data_files=[path], split="train", streaming=True, **options)
            batches = stream.iter(batch_size=READ_BATCH_ROWS)
            if builder == "text":
                yield from self._group_lines(batches)
            else:
                yield from self._split_records(batches, path)
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

    def _split_records(self, batches, where: str) -> Iterator[Document]:
        column = self.cfg.text_column
        for batch in batches:
            if column not in batch:
                raise CrammingError(f"{where}: no column {column!r} (columns: {', '.join(batch)}); set data.text_column")
            for text in batch[column]:
                if text:
                    yield text.split("\n")

    def _hub_documents(self) -> Iterator[Document]:
        import datasets

        cfg = self.cfg
        where = f"hub dataset {cfg.hub_path}" + (f"/{cfg.hub_name}" if cfg.hub_name else "")
        try:
            stream = datasets.load_dataset(cfg.hub_path, cfg.hub_name, split=cfg.split, streaming=cfg.streaming)
        except Exception as error:  # offline, unknown name, no such split: the hub client's own message says which
            raise CrammingError(f"cannot load {where}: {type(error).__name__}: {error}") from None
        yield from self._split_records(stream.iter(batch_size=READ_BATCH_ROWS), where)
