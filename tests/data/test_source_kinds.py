"""One class per data.source behind one interface: the lookup, and the cache keys of existing configs, which
the split into classes must not change (a changed key silently re-prepares every user's cached dataset)."""

import hashlib
import os

import pytest
from omegaconf import OmegaConf

from cramming import CONFIG_DIR
from cramming.data import store
from cramming.data.sources import (SOURCES, EmbeddedSource, HubSource, LocalSource, Mixture, embedded_documents,
                                   source_from_config)
from tests.commands import modules_after
from tests.train.runs import compose_config

# The cache keys of existing datasets, pinned (from these fingerprints): a change in how keys are computed
# would prepare every cached dataset again.
KEYS_BEFORE_THE_SPLIT = {
    "embedded": "a2eef2060a532c91",
    "local": "d07f5e4af5684423",
    "wikipedia": "0065877f82862380",
    "fineweb-edu": "87292eff4f19e729",
}
FINGERPRINTS = {
    "embedded": {"embedded_sha256": "0" * 64},
    "local": {"files": [{"path": "/corpus/a.txt", "bytes": 1000, "mtime_ns": 1_700_000_000_000_000_000}]},
    "wikipedia": {"hub": ["wikimedia/wikipedia", "20231101.en", "train", "text"]},
    "fineweb-edu": {"hub": ["HuggingFaceFW/fineweb-edu", "sample-10BT", "train", "text"]},
}


def data_config(name: str, *overrides: str):
    files = ["data.files=/corpus/a.txt"] if name == "local" else []
    return OmegaConf.to_object(compose_config([f"data={name}", *files, *overrides]).data)


@pytest.mark.parametrize("name", sorted(KEYS_BEFORE_THE_SPLIT))
def test_existing_configs_keep_their_cache_keys(name):
    assert store.cache_key(data_config(name), FINGERPRINTS[name]) == KEYS_BEFORE_THE_SPLIT[name]


def test_fingerprints_keep_their_form(tmp_path):
    """With the keys above, the fingerprints themselves fix the key of a real file and the real embedded corpus."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("some text\n")
    os.utime(corpus, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    local = source_from_config(OmegaConf.to_object(compose_config(["data=local", f"data.files={corpus}"]).data))
    assert local.fingerprint() == {"files": [{"path": str(corpus), "bytes": 10, "mtime_ns": 1_700_000_000_000_000_000}]}
    text = "\f".join("\n".join(document) for document in embedded_documents())
    embedded = source_from_config(data_config("embedded"))
    assert embedded.fingerprint() == {"embedded_sha256": hashlib.sha256(text.encode()).hexdigest()}
    for name in ("wikipedia", "fineweb-edu"):
        assert source_from_config(data_config(name)).fingerprint() == FINGERPRINTS[name]


def test_the_lookup_gives_one_class_per_source(tmp_path):
    (tmp_path / "a.txt").write_text("text\n")
    configs = {"embedded": data_config("embedded"), "hub": data_config("wikipedia"),
               "local": OmegaConf.to_object(compose_config(["data=local", f"data.files={tmp_path}/a.txt"]).data),
               "mixture": OmegaConf.to_object(compose_config(["data=mixture",
                                                              f"data.sources=[{{files: {tmp_path}/a.txt}}]"]).data)}
    kinds = {name: type(source_from_config(cfg)) for name, cfg in configs.items()}
    assert kinds == {"embedded": EmbeddedSource, "hub": HubSource, "local": LocalSource, "mixture": Mixture}


def test_every_kind_is_the_source_of_a_data_config_and_every_data_config_names_a_kind():
    """`data=<name>` is how users choose: a kind no file of the group names could not be chosen."""
    named = {OmegaConf.load(path).source for path in (CONFIG_DIR / "data").glob("*.yaml")}
    assert named == {source.name for source in SOURCES}


def test_mixture_and_the_sources_it_reads_do_not_import_the_lookup():
    """The one import cycle of the data layer (sources ⇄ mixture) is gone: the kinds sit below the lookup."""
    imported = modules_after("import cramming.data.mixture, cramming.data.embedded_source, cramming.data.hub_source")
    assert "cramming.data.mixture" in imported and "cramming.data.sources" not in imported


@pytest.mark.parametrize(("name", "override"), [("wikipedia", "data.hub_revision=main"),
                                                ("fineweb-edu", "data.max_tokens=1000000"),
                                                ("embedded", "data.max_tokens=1000000")])
def test_a_set_revision_or_token_cap_keys_another_dataset(name, override):
    """At null they leave the keys above as they were (not in store.FIRST_DATA_KEYS); set, they change what is
    prepared."""
    assert store.cache_key(data_config(name, override), FINGERPRINTS[name]) != KEYS_BEFORE_THE_SPLIT[name]
