"""What every data source offers the pipeline: the `Source` interface a kind implements, and the `Document`
it yields.

Every source yields documents as lists of lines: lines are what the tokenizer encodes (short strings
encode fastest), documents are what the filters judge and what [SEP] separates when packing. A source class
is a plug-in (cramming.plugins): it names its `data.source` value in `name` (`name = "hub"`) and declares the
keys only it reads in `settings`; its section is `data`. `cramming.data.sources` registers every kind (SOURCES),
which composes the `data` schema and looks up the kind a config names.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

from cramming.data.config import DataBaseConfig
from cramming.errors import CrammingError
from cramming.plugins import Plugin, Setting

Document = list[str]

SAMPLE_BY = ("line", "paragraph")


class Source(Plugin, ABC):
    """A resolved data source: its documents, its size when known up front, and a fingerprint for the cache key."""

    name: ClassVar[str]  # its data.source value
    settings: ClassVar[tuple[Setting, ...]] = ()  # the keys of `data` only this kind reads

    def __init__(self, cfg: DataBaseConfig):
        self.cfg = cfg

    @classmethod
    def check(cls, cfg: DataBaseConfig) -> None:
        """This kind's rules on `data`, before any text is read, called for every kind whether it is the source
        or not: its settings when it is (`cfg.source == cls.name`), and when another kind is, any of its keys
        set, which would silently do nothing; CrammingError naming the first bad one. The keys every source
        shares are checked by the schema."""

    @classmethod
    @abstractmethod
    def build(cls, cfg: DataBaseConfig) -> "Source":
        """This kind's source for `cfg` (whose settings cramming.data.sources.source_from_config has checked)."""

    @property
    def where(self) -> str:
        """Where its documents come from, as a message names it: the settings and what they name."""
        return f"the {self.name} corpus"

    @abstractmethod
    def fingerprint(self) -> dict:
        """What identifies the raw text, for the cache key: content hash, file identities, or hub coordinates."""

    def input_files(self) -> list[str]:
        """The local files it reads, whose formats are checked before any work (cramming.data.first_look)."""
        return []

    def total_bytes(self) -> int | None:
        """Uncompressed input size when it can be known up front (for the progress bar)."""
        return None

    def provenance(self) -> dict:
        """What was read beyond the fingerprint, for meta.json once the documents have been read (the hub's commit)."""
        return {}

    @abstractmethod
    def documents(self) -> Iterator[Document]:
        """The documents, in reading order."""

    def tagged_documents(self) -> Iterator[tuple[int, Document]]:
        """(index of the source, document): always source 0 here; a Mixture has several."""
        for document in self.documents():
            yield 0, document


def split_records(batches: Iterable[dict], column: str, where: str) -> Iterator[Document]:
    """Records (batches of columns) → documents: the text column, split into lines; a record without text (null,
    missing or empty) is an empty document, which the filter counts as dropped (no_text)."""
    for batch in batches:
        if column not in batch:
            raise CrammingError(f"{where}: no column {column!r} (columns: {', '.join(batch)}); set data.text_column")
        for text in batch[column]:
            yield text.split("\n") if text else []
