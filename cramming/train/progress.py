"""How far along training is: the progress a checkpoint saves (steps, microbatches, tokens, seconds), which the
budget clock (cramming.train.stopping) and the data stream read."""

from dataclasses import dataclass


@dataclass
class Progress:
    """Where training stands, in the units the budget, the data stream and the checkpoints count; saved in every
    checkpoint, so a resumed run goes on from the same step, microbatch and clock."""

    step: int = 0  # optimizer steps taken
    microbatches: int = 0  # global microbatches consumed: the position in the data stream
    tokens: int = 0
    elapsed: float = 0.0  # training seconds, earlier runs of a resumed training included
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0
    lost_to_crashes: float = 0.0  # seconds charged on resumes for training lost after the last checkpoint
