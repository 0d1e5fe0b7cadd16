"""data=embedded: the reference documentation bundled with every CPython, for offline use and the tests."""

import hashlib
from collections.abc import Iterator

from cramming.data.config import DataBaseConfig
from cramming.data.source_base import Document, Source
from cramming.errors import CrammingError


def embedded_documents() -> list[Document]:
    """The reference documentation bundled with every CPython (pydoc_data): English prose, no download."""
    try:
        from pydoc_data.topics import topics  # noqa: PLC0415 -- some Pythons lack it: the error below
    except ImportError:
        raise CrammingError("the embedded corpus needs the standard library's pydoc_data, missing here") from None
    return [topics[name].split("\n") for name in sorted(topics)]


class EmbeddedSource(Source):
    name = "embedded"

    @classmethod
    def build(cls, cfg: DataBaseConfig) -> "EmbeddedSource":
        return cls(cfg)

    def fingerprint(self) -> dict:
        digest = hashlib.sha256("\f".join("\n".join(doc) for doc in embedded_documents()).encode()).hexdigest()
        return {"embedded_sha256": digest}

    def total_bytes(self) -> int:
        return sum(len(line) + 1 for doc in embedded_documents() for line in doc)

    def documents(self) -> Iterator[Document]:
        yield from embedded_documents()
