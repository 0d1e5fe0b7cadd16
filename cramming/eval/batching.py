"""Encoded task splits, cut into dynamically padded batches (each task encodes its own: tasks/).

Training batches group examples of similar length (length bucketing) so that little compute goes
to padding; evaluation batches are sorted by length outright, since their order does not matter.

A compiled fine-tuning (cramming.eval.compiled) pads every batch to one of a few static widths instead of its
longest example, so that torch.compile builds a bounded number of graphs per task.
"""

from dataclasses import dataclass

import torch

BUCKET_BATCHES = 50  # length bucketing sorts within windows of this many batches, so batches stay random
STATIC_WIDTH_FROM = 32  # static widths: 32, 64, 128, ... tokens, the last one max_length


@dataclass
class EncodedSplit:
    # [CLS] a [SEP] b [SEP], truncated, unpadded; for multiple choice a list of such rows (one a choice) per example
    input_ids: list[list[int]] | list[list[list[int]]]
    labels: torch.Tensor  # (N,) int64 class ids, or float32 scores for regression
    source: str = ""  # the file or hub split it came from, for messages
    token_type_ids: list[list[int]] | list[list[list[int]]] | None = None  # segment ids, where read (BERT)
    # what the task's score reads beside the labels, one entry per example (MultiRC: the question of each
    # answer; ReCoRD: the query, candidate and right answers of each row; RACE: the level); None for most tasks
    scoring: list | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def choices(self) -> int | None:
        """Rows per example of a multiple-choice split; None for one row per example."""
        return len(self.input_ids[0]) if self.input_ids and isinstance(self.input_ids[0][0], list) else None

    def length(self, index: int) -> int:
        """Tokens of example `index` (of its longest choice)."""
        row = self.input_ids[index]
        return len(row) if self.choices is None else max(len(choice) for choice in row)


def chosen_rows(total: int, count: int, seed: int = 0) -> list[int]:
    """A fixed random `count` of `total` example indices in their order (the same for every fine-tuning seed);
    all of them when `count` is not less."""
    if count >= total:
        return list(range(total))
    return torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:count].sort().values.tolist()


def subset(split: EncodedSplit, count: int, seed: int = 0) -> EncodedSplit:
    """The examples `chosen_rows` picks."""
    if count >= len(split):
        return split
    rows = chosen_rows(len(split), count, seed)
    token_types = None if split.token_type_ids is None else [split.token_type_ids[i] for i in rows]
    scoring = None if split.scoring is None else [split.scoring[i] for i in rows]
    return EncodedSplit([split.input_ids[i] for i in rows], split.labels[rows], split.source, token_types, scoring)


def training_batches(
    split: EncodedSplit, batch_size: int, generator: torch.Generator, length_bucketing: bool
) -> list[list[int]]:
    """Indices of one epoch's batches: a random permutation, cut into batches of similar length if asked.

    Bucketing sorts by length inside windows of BUCKET_BATCHES batches and then shuffles the batches,
    so the number of batches (and so the schedule) is the same as without it.
    """
    order = torch.randperm(len(split), generator=generator).tolist()
    if not length_bucketing:
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    window = batch_size * BUCKET_BATCHES
    batches = []
    for start in range(0, len(order), window):
        by_length = sorted(order[start : start + window], key=split.length)
        batches += [by_length[i : i + batch_size] for i in range(0, len(by_length), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def evaluation_batches(split: EncodedSplit, batch_size: int) -> list[list[int]]:
    by_length = sorted(range(len(split)), key=split.length)
    return [by_length[start : start + batch_size] for start in range(0, len(by_length), batch_size)]


def filled(indices: list[int], batch_size: int) -> list[int]:
    """A short evaluation batch made full by repeating its first example, so that a compiled evaluation
    sees one batch size; the outputs past len(indices) are dropped."""
    return indices + indices[:1] * (batch_size - len(indices))


def static_width(longest: int, max_length: int) -> int:
    """The width a compiled step pads a batch to: the next of STATIC_WIDTH_FROM, twice that, ... that holds
    `longest`, at most max_length (the tasks truncate there): three widths at the protocol's 128."""
    width = STATIC_WIDTH_FROM
    while width < longest:
        width *= 2
    return max(longest, min(width, max_length))


def collate(split: EncodedSplit, indices: list[int], pad_id: int,
            static_up_to: int | None = None) -> dict[str, torch.Tensor]:
    """Pad to the longest example of the batch, or with `static_up_to` (the task's max_length) to its
    static_width: input_ids, attention_mask and, where the split has them, token_type_ids (B, T), or
    (B, choices, T) for multiple choice; labels (B,)."""
    choices = split.choices
    if choices is not None:  # every choice as a row, then (B * choices, T) -> (B, choices, T)
        rows = [row for i in indices for row in split.input_ids[i]]
        types = split.token_type_ids and [row for i in indices for row in split.token_type_ids[i]]
        every_row = list(range(len(rows)))
        flat = collate(EncodedSplit(rows, torch.zeros(len(rows)), split.source, types), every_row, pad_id,
                       static_up_to)
        batch = {key: value.view(len(indices), choices, -1) for key, value in flat.items() if key != "labels"}
        return batch | {"labels": split.labels[indices]}
    rows = [split.input_ids[i] for i in indices]
    width = max(len(row) for row in rows)
    if static_up_to is not None:
        width = static_width(width, static_up_to)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for row_index, row in enumerate(rows):
        input_ids[row_index, : len(row)] = torch.tensor(row)
        attention_mask[row_index, : len(row)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": split.labels[indices]}
    if split.token_type_ids is not None:
        batch["token_type_ids"] = torch.zeros((len(rows), width), dtype=torch.int64)
        for row_index, i in enumerate(indices):
            batch["token_type_ids"][row_index, : len(split.token_type_ids[i])] = torch.tensor(split.token_type_ids[i])
    return batch
