"""Where raw text comes from: one class per `data.source`, behind the interface of `source_base.Source`.

    embedded  embedded_source.EmbeddedSource   the reference documentation bundled with CPython
    local     local_source.LocalSource         text files through `datasets`' builders
    hub       hub_source.HubSource             a hub dataset, streamed
    mixture   mixture.Mixture                  several local sources interleaved by weight

Importing this module defines (and so registers) every kind: `Source.from_config(cfg)` from here knows them all.
"""

from cramming.data.embedded_source import EmbeddedSource, embedded_documents
from cramming.data.hub_source import HubSource
from cramming.data.local_source import BUILDERS, LocalSource, builder_for, resolve_files, text_size_bytes
from cramming.data.mixture import Mixture
from cramming.data.source_base import KINDS, SAMPLE_BY, Document, Source

SOURCES = tuple(sorted(KINDS))  # the values of data.source

__all__ = ["BUILDERS", "SAMPLE_BY", "SOURCES", "Document", "EmbeddedSource", "HubSource", "LocalSource", "Mixture",
           "Source", "builder_for", "embedded_documents", "resolve_files", "text_size_bytes"]
