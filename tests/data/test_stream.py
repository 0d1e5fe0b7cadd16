"""The pretraining stream: ranks read disjoint rows, and a stream started at microbatch g is exactly the
tail of the stream started at 0 (what makes a resume neither replay nor skip)."""

import itertools

import pytest
import torch
from omegaconf import OmegaConf

from cramming.data.prepare import prepare_dataset
from cramming.data.sources import DataConfig
from cramming.data.stream import Microbatches, microbatch_stream


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(DataConfig),
                                              {"name": "embedded", "source": "embedded",
                                               "tokenizer": {"vocab_size": 1024}}))
    return prepare_dataset(cfg, str(tmp_path_factory.mktemp("cache")))[0]


def test_ranks_read_disjoint_rows_of_each_global_microbatch(dataset):
    ranks = [Microbatches(dataset, 4, rank, 2, mlm_rate=0.25, seed=0) for rank in range(2)]
    assert len(ranks[0]) == dataset.training_rows // 8  # the held-out validation rows are never read
    for index in range(3):
        rows = [microbatches.rows.batch((index * 2 + rank) * 4, 4) for rank, microbatches in enumerate(ranks)]
        positions = [[row["position"] for row in part] for part in rows]
        assert positions == [list(range(index * 8, index * 8 + 4)), list(range(index * 8 + 4, index * 8 + 8))]
        batches = [microbatches[index] for microbatches in ranks]
        assert not torch.equal(batches[0]["input_ids"], batches[1]["input_ids"])


def test_a_stream_started_later_is_the_tail_of_the_stream(dataset):
    microbatches = Microbatches(dataset, 4, 0, 1, mlm_rate=0.25, seed=0)
    whole = list(itertools.islice(microbatch_stream(microbatches, 0, num_workers=0, pin_memory=False), 6))
    resumed = list(itertools.islice(microbatch_stream(microbatches, 3, num_workers=0, pin_memory=False), 3))
    for expected, got in zip(whole[3:], resumed):
        assert all(torch.equal(expected[key], got[key]) for key in expected)
    assert not torch.equal(whole[0]["input_ids"], whole[1]["input_ids"])
