"""What every data source offers the pipeline, and the lookup from `data.source` to the class that reads it.

Every source yields documents as lists of lines: lines are what the tokenizer encodes (short strings
encode fastest), documents are what the filters judge and what [SEP] separates when packing. A source class
registers itself under its `data.source` name when it is defined (`class HubSource(Source, kind="hub")`);
`cramming.data.sources` imports every kind, so use `Source` from there.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

from cramming.data.config import DataConfig
from cramming.errors import CrammingError, require

Document = list[str]

SAMPLE_BY = ("line", "paragraph")
KINDS: dict[str, type["Source"]] = {}  # data.source → its class


class Source(ABC):
    """A resolved data source: its documents, its size when known up front, and a fingerprint for the cache key."""

    kind: ClassVar[str]
    reads_revision: ClassVar[bool] = False  # data.hub_revision (hub datasets)
    reads_sources: ClassVar[bool] = False  # data.sources (mixtures)

    def __init__(self, cfg: DataConfig):
        self.cfg = cfg

    def __init_subclass__(cls, kind: str, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.kind = kind
        KINDS[kind] = cls

    @classmethod
    def from_config(cls, cfg: DataConfig) -> "Source":
        """The source `cfg` names (data=mixture: a cramming.data.mixture.Mixture), its settings checked."""
        cls.check_config(cfg)
        return KINDS[cfg.source].build(cfg)

    @staticmethod
    def check_config(cfg: DataConfig) -> None:
        """The source settings of `cfg`, checked by the kind of source it names: one line naming the first bad one."""
        require([(cfg.source in KINDS, f"data.source={cfg.source!r} is unknown; choose one of {', '.join(sorted(KINDS))}"),
                 (cfg.sample_by in SAMPLE_BY,
                  f"data.sample_by={cfg.sample_by!r} is unknown; choose one of {', '.join(SAMPLE_BY)}")])
        KINDS[cfg.source].check(cfg)

    @classmethod
    def check(cls, cfg: DataConfig) -> None:
        """This kind's settings, before any text is read: a kind adds the rules of the keys it reads."""
        require([
            (cls.reads_revision or cfg.hub_revision is None,
             f"data.hub_revision={cfg.hub_revision} is read only with data.source=hub (here data.source={cfg.source})"),
            (cls.reads_sources or not cfg.sources,
             f"data.sources is set but data.source={cfg.source}: mixtures need data=mixture"),
        ])

    @classmethod
    @abstractmethod
    def build(cls, cfg: DataConfig) -> "Source":
        """This kind's source for `cfg` (whose common settings from_config has checked)."""

    @abstractmethod
    def fingerprint(self) -> dict:
        """What identifies the raw text, for the cache key: content hash, file identities, or hub coordinates."""

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
    """Records (batches of columns) → documents: the text column, split into lines."""
    for batch in batches:
        if column not in batch:
            raise CrammingError(f"{where}: no column {column!r} (columns: {', '.join(batch)}); set data.text_column")
        for text in batch[column]:
            if text:
                yield text.split("\n")
