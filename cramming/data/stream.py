"""The pretraining input stream: microbatch g of rank r holds the rows at positions
[(g * world + r) * B, (g * world + r + 1) * B), so ranks read disjoint slices and a resume that starts
at microbatch g continues the stream exactly, with no replay and no skip."""

import itertools
import signal

import torch
from torch.utils.data import DataLoader, Dataset

from cramming.data.mlm import MLMCollator, PackedRows
from cramming.data.store import PreparedDataset

# What a sampling stream (cramming.train.techniques.importance_sampling) adds to a batch beside the model's
# inputs: the rows' positions in the data order and their importance weights, for the loss, not the model.
SAMPLE_KEYS = ("sample_positions", "sample_weights")


class Microbatches(Dataset):
    def __init__(self, dataset: PreparedDataset, microbatch_size: int, rank: int, world_size: int,
                 mlm_rate: float, seed: int):
        self.rows = PackedRows(dataset)
        self.collate = MLMCollator(dataset.meta["vocab_size"], mlm_rate=mlm_rate, seed=seed)
        self.microbatch_size = microbatch_size
        self.rank = rank
        self.world_size = world_size

    def __len__(self) -> int:  # one epoch; indices past it wrap (see PackedRows)
        return len(self.rows) // (self.microbatch_size * self.world_size)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = (index * self.world_size + self.rank) * self.microbatch_size
        return self.collate(self.rows.batch(start, self.microbatch_size))


def ignore_signals_in_worker(worker_id: int) -> None:
    """A loader worker leaves Ctrl-C and SIGTERM to the training process, which may still need batches to
    finish its step before it stops; the workers end when the training process closes them."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def microbatch_stream(microbatches: Microbatches, start: int, num_workers: int, pin_memory: bool):
    """An endless iterator of microbatches from global microbatch `start` on, built ahead by workers."""
    loader = DataLoader(
        microbatches,
        batch_size=None,
        sampler=itertools.count(start),
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=4 if num_workers else None,
        persistent_workers=num_workers > 0,
        worker_init_fn=ignore_signals_in_worker if num_workers else None,
    )
    return iter(loader)
