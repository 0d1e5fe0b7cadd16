import numpy as np
import pytest
import torch

from cramming.data.mlm import IGNORE_INDEX, MLMCollator, masked_count, synthetic_mlm_batch
from cramming.data.vocab import MASK_ID, SEP_ID, SPECIAL_TOKENS
from cramming.errors import CrammingError

VOCAB = 1000


def rows(batch=64, seq_length=128, seed=0):
    generator = np.random.default_rng(seed)
    data = generator.integers(5, VOCAB, size=(batch, seq_length)).astype(np.uint16)
    data[:, ::17] = SEP_ID  # document boundaries inside rows
    return [{"position": 100 + i, "input_ids": data[i]} for i in range(batch)]


def test_exact_count_labels_only_at_masked_positions_and_never_specials():
    items = rows()
    batch = MLMCollator(VOCAB, mlm_rate=0.25, seed=1)(items)
    original = torch.from_numpy(np.stack([item["input_ids"] for item in items]).astype(np.int64))
    k = masked_count(128, 0.25)
    assert k == 32 and batch["masked_positions"].shape == (64, k)
    labelled = batch["labels"] != IGNORE_INDEX
    assert (labelled.sum(dim=1) == k).all()
    assert torch.equal(labelled, torch.zeros_like(labelled).scatter_(1, batch["masked_positions"], True))
    assert torch.equal(batch["labels"][labelled], original[labelled])
    assert not (original[labelled] == SEP_ID).any()
    assert torch.equal(batch["input_ids"][~labelled], original[~labelled])
    assert all(t.dtype == torch.int64 for t in batch.values())


def test_80_10_10_rule():
    items = rows(batch=512)
    batch = MLMCollator(VOCAB, mlm_rate=0.15, seed=2)(items)
    original = torch.from_numpy(np.stack([item["input_ids"] for item in items]).astype(np.int64))
    labelled = batch["labels"] != IGNORE_INDEX
    chosen, before = batch["input_ids"][labelled], original[labelled]
    total = labelled.sum().item()
    masked = (chosen == MASK_ID).float().sum().item() / total
    kept = (chosen == before).float().sum().item() / total
    random = 1 - masked - kept
    assert abs(masked - 0.8) < 0.02 and abs(kept - 0.1) < 0.015 and abs(random - 0.1) < 0.015
    assert ((chosen >= 5) | (chosen == MASK_ID)).all()  # random replacements are never special tokens


def test_seeded_and_reproducible():
    items = rows()
    first = MLMCollator(VOCAB, seed=5)(items)
    again = MLMCollator(VOCAB, seed=5)(items)
    other_seed = MLMCollator(VOCAB, seed=6)(items)
    later = MLMCollator(VOCAB, seed=5)([dict(item, position=item["position"] + 64) for item in items])
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert not torch.equal(first["masked_positions"], other_seed["masked_positions"])
    assert not torch.equal(first["masked_positions"], later["masked_positions"])  # e.g. the next epoch


def test_row_with_too_few_regular_tokens_keeps_static_shape():
    row = np.full(16, SEP_ID, dtype=np.uint16)
    row[:3] = [7, 8, 9]
    batch = MLMCollator(VOCAB, mlm_rate=0.5, seed=0)([{"position": 0, "input_ids": row}])
    assert batch["masked_positions"].shape == (1, 8)
    assert sorted(batch["labels"][batch["labels"] != IGNORE_INDEX].tolist()) == [7, 8, 9]
    assert (batch["input_ids"][0, 3:] == SEP_ID).all()


def test_bad_rate():
    with pytest.raises(CrammingError, match="mlm_rate=1.5"):
        MLMCollator(VOCAB, mlm_rate=1.5)


def test_synthetic_batches_have_the_real_format_and_are_reproducible():
    batch = synthetic_mlm_batch(8, 64, VOCAB, mlm_rate=0.25, seed=3)
    k = masked_count(64, 0.25)
    assert batch["input_ids"].shape == batch["labels"].shape == (8, 64) and batch["masked_positions"].shape == (8, k)
    assert all(value.dtype == torch.int64 for value in batch.values())
    labelled = batch["labels"] != IGNORE_INDEX
    assert (labelled.sum(dim=1) == k).all()  # random rows have no special tokens: every row gets k targets
    assert torch.equal(labelled, torch.zeros_like(labelled).scatter_(1, batch["masked_positions"], True))
    assert (batch["labels"][labelled] >= len(SPECIAL_TOKENS)).all()
    assert (batch["input_ids"][labelled] == MASK_ID).float().mean() > 0.6  # the 80/10/10 rule at work
    again = synthetic_mlm_batch(8, 64, VOCAB, mlm_rate=0.25, seed=3)
    assert all(torch.equal(batch[key], again[key]) for key in batch)
