"""The trash filter relative to the corpus's median tokens per character (data.filter.trash_cutoff_scaling=median):
on real Gutenberg paragraphs it drops about the same share at a small and a larger vocabulary, where the
fixed cutoff does not."""

import gzip

import numpy as np
import pytest
from omegaconf import OmegaConf

from cramming.data import store
from cramming.data.config import FilterConfig
from cramming.data.description import describe_dataset
from cramming.data.filters import median_tokens_per_char, trash_cutoff
from cramming.data.prepare import prepare_dataset
from cramming.data.sources import DataConfig
from tests.train.runs import compose_config


def test_the_median_is_the_median_character():
    assert median_tokens_per_char(np.array([1, 2, 9]), np.array([10, 10, 10])) == pytest.approx(0.2)
    # a long document outweighs two short ones
    assert median_tokens_per_char(np.array([1, 30, 9]), np.array([10, 100, 10])) == pytest.approx(0.3)
    assert median_tokens_per_char(np.array([5]), np.array([0])) == 5.0  # empty text counts as one character


def test_the_cutoff_in_tokens_per_character():
    assert trash_cutoff(FilterConfig(trash_cutoff=0.3), 0.25) == 0.3
    assert trash_cutoff(FilterConfig(trash_cutoff=None, trash_cutoff_scaling="median"), 0.25) is None
    assert trash_cutoff(FilterConfig(trash_cutoff=1.3, trash_cutoff_scaling="median"), 0.25) == pytest.approx(0.325)


def test_the_setting_is_part_of_the_key_only_when_used():
    plain = DataConfig(name="e", source="embedded")
    scaled = DataConfig(name="e", source="embedded",
                        filter=FilterConfig(trash_cutoff=1.3, trash_cutoff_scaling="median"))
    assert store.cache_key(plain, {}) != store.cache_key(scaled, {})
    scaled.filter.trash_cutoff_scaling = "none"
    assert store.cache_key(scaled, {}) == store.cache_key(DataConfig(name="e", source="embedded",
                                                                     filter=FilterConfig(trash_cutoff=1.3)), {})


@pytest.fixture(scope="module")
def paragraphs(gutenberg_valid, tmp_path_factory):
    """About 1 MB of real book paragraphs, one document per line."""
    path = tmp_path_factory.mktemp("trash") / "paragraphs.txt"
    with gzip.open(gutenberg_valid, "rt", encoding="utf-8") as handle:
        path.write_text("".join(handle.readline() for _ in range(5000)))
    return path


def trashed_share(dataset) -> float:
    documents = dataset.meta["documents"]
    return documents["dropped"]["trash"] / (documents["kept"] + documents["dropped"]["trash"])


def test_median_scaling_drops_alike_at_two_vocabulary_sizes(paragraphs, tmp_path):
    shares = {}
    for vocab_size in (600, 4000):
        for scaling, cutoff in (("none", 0.3), ("median", 1.3)):
            data = compose_config(["data=local", f"data.files={paragraphs}", "data.sample_by=line",
                                   f"data.tokenizer.vocab_size={vocab_size}", "data.validation_rows=0",
                                   f"data.filter.trash_cutoff={cutoff}",
                                   f"data.filter.trash_cutoff_scaling={scaling}"]).data
            dataset, _ = prepare_dataset(OmegaConf.to_object(data), tmp_path / "cache")
            shares[vocab_size, scaling] = trashed_share(dataset)
            trash = dataset.meta["trash_filter"]
            if scaling == "median":
                assert 0.2 < trash["median_ratio"] < 0.5
                assert trash["cutoff"] == pytest.approx(1.3 * trash["median_ratio"], abs=1e-5)
                assert "x the median" in describe_dataset(dataset, False, 1.0)
            else:
                assert trash == {"cutoff": 0.3, "scaling": "none", "median_ratio": None}
    # measured: fixed 0.3 drops 97% of the paragraphs at 600 and 23% at 4000; 1.3 x the median 3% and 7%
    assert shares[600, "none"] > 0.9 and shares[4000, "none"] < 0.35
    assert 0.01 < shares[600, "median"] < 0.1 and 0.01 < shares[4000, "median"] < 0.1
