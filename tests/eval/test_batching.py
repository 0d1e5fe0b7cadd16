"""Tokenization into [CLS] a [SEP] b [SEP], length-bucketed batches, padding."""

import math

import torch

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer
from cramming.eval.batching import EncodedSplit, collate, evaluation_batches, training_batches
from cramming.eval.tasks.classification import TextSplit, encode_split


def test_pairs_are_cls_a_sep_b_sep_and_truncated():
    texts = ["alpha beta gamma delta epsilon"] * 10
    tokenizer = as_transformers_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=40), NormalizeConfig()))
    split = TextSplit(["alpha beta", "alpha " * 50], ["gamma", "delta " * 50], [0, 1], "test")
    encoded = encode_split(split, tokenizer, max_length=16, regression=False)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    first = encoded.input_ids[0]
    assert first[0] == cls and first.count(sep) == 2 and first[-1] == sep
    assert tokenizer.decode(first, skip_special_tokens=True) == "alpha beta gamma"
    assert len(encoded.input_ids[1]) == 16 and encoded.input_ids[1].count(sep) == 2
    assert encoded.labels.dtype == torch.int64
    assert encode_split(split, tokenizer, 16, regression=True).labels.dtype == torch.float32


def _split(lengths: list[int]) -> EncodedSplit:
    return EncodedSplit([[7] * length for length in lengths], torch.arange(len(lengths)))


def test_bucketed_batches_cover_every_example_once_with_less_padding():
    lengths = [int(n) for n in torch.randint(3, 128, (1000,), generator=torch.Generator().manual_seed(0))]
    split = _split(lengths)

    def padded_tokens(batches):
        return sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)

    plain = training_batches(split, 16, torch.Generator().manual_seed(1), length_bucketing=False)
    bucketed = training_batches(split, 16, torch.Generator().manual_seed(1), length_bucketing=True)
    for batches in (plain, bucketed):
        assert len(batches) == math.ceil(1000 / 16)  # the schedule does not depend on bucketing
        assert sorted(i for batch in batches for i in batch) == list(range(1000))
    assert padded_tokens(bucketed) < 0.7 * padded_tokens(plain)
    evaluation = evaluation_batches(split, 128)
    assert sorted(i for batch in evaluation for i in batch) == list(range(1000))


def test_collate_pads_to_the_longest_and_masks_the_padding():
    batch = collate(_split([2, 4, 3]), [0, 1], pad_id=0)
    assert batch["input_ids"].tolist() == [[7, 7, 0, 0], [7, 7, 7, 7]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch["labels"].tolist() == [0, 1]
