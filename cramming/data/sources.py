"""Where raw text comes from: one class per `data.source` (its `name`), each in its own file behind the interface
of `source_base.Source`, listed in the registry SOURCES (cramming.plugins.Registry); the `data` schema,
DataConfig, which the registry composes from the keys every source shares and each kind's own (its `settings`);
and the lookup from a data config to its source.

Adding a kind: its file (a Source subclass with its `name` and `settings`), one line in SOURCES, a test. A
source's settings are its kind's to check, so the whole data config is checked from here (`check_data_config`),
above the schema.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from cramming.data.config import DataBaseConfig
from cramming.data.embedded_source import EmbeddedSource, embedded_documents
from cramming.data.hub_source import HubSource
from cramming.data.local_source import BUILDERS, LocalSource, builder_for, resolve_files, text_size_bytes
from cramming.data.mixture import Mixture
from cramming.data.source_base import SAMPLE_BY, Source
from cramming.errors import problems_of, raise_problems, require
from cramming.plugins import Registry

SOURCES: Registry[type[Source]] = Registry("data.source", (EmbeddedSource, HubSource, LocalSource, Mixture))


@dataclass
class DataConfig(DataBaseConfig):
    """The `data` section: the keys every source shares (cramming.data.config) and each kind's own."""


DataConfig = SOURCES.schema(DataConfig, "data")
ConfigStore.instance().store(group="data", name="schema", node=DataConfig)

__all__ = ["BUILDERS", "SOURCES", "DataConfig", "EmbeddedSource", "HubSource", "LocalSource", "Mixture",
           "builder_for", "check_data_config", "embedded_documents", "resolve_files", "source_from_config",
           "text_size_bytes"]


def _check_source_settings(cfg: DataConfig) -> None:
    """The source settings of `cfg`, checked by the kind of source it names: every problem."""
    sample_by = [(cfg.sample_by in SAMPLE_BY,
                  f"data.sample_by={cfg.sample_by!r} is unknown; choose one of {', '.join(SAMPLE_BY)}")]
    raise_problems(problems_of(lambda: SOURCES.named(cfg.source), lambda: require(sample_by),
                               lambda: SOURCES.check(cfg)))


def check_data_config(cfg: DataConfig) -> None:
    """Every value of `cfg` in its domain before any text is read: the source's settings (by its kind's class) and
    the rest (`DataConfig.check`); every problem."""
    raise_problems(problems_of(lambda: _check_source_settings(cfg), cfg.check))


def source_from_config(cfg: DataConfig) -> Source:
    """The source `cfg` names (data=mixture: a cramming.data.mixture.Mixture), its settings checked."""
    _check_source_settings(cfg)
    return SOURCES.named(cfg.source).build(cfg)
