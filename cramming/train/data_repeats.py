"""How often a run goes through its training rows, said when it is many times: a dataset much smaller than the
budget (a small data.max_tokens, a small corpus) otherwise trains on the same few rows over and over in silence.

Muennighoff et al., 2023 ("Scaling Data-Constrained Language Models"): up to about 4 epochs, repeated data
trains nearly as well as new data; the value of each repeat then decays exponentially, with a fitted constant
of about 15 epochs (R*_D = 15.4), so that past about 16 epochs more passes are worth little. The notice starts
there: the quick start's few passes over the embedded corpus are no news, a slice seen hundreds of times is.
"""

import logging

from cramming.train.callbacks import Callback, TrainState

MANY_EPOCHS = 16

log = logging.getLogger("pretrain")


class DataRepeats(Callback):
    """A warning, once a run, when it passes MANY_EPOCHS of its training rows: at the start where its plan says it
    will (train.progress=steps), else after the step that passes them; and at the end, how many it went through."""

    def __init__(self, training_rows: int, sequences_per_microbatch: int, planned_microbatches: int | None,
                 data_setting: str):
        self.training_rows, self.sequences_per_microbatch = training_rows, sequences_per_microbatch
        self.planned_microbatches = planned_microbatches  # the whole run's, where the plan fixes it
        self.data_setting = data_setting  # what decided the rows' count, for the message
        self.warned = False

    def epochs(self, microbatches: int) -> float:
        return microbatches * self.sequences_per_microbatch / self.training_rows

    def on_train_start(self, state: TrainState) -> None:
        if self.planned_microbatches is not None and self.epochs(self.planned_microbatches) > MANY_EPOCHS:
            self._warn(f"this run's {self.planned_microbatches * self.sequences_per_microbatch:,} sequences will go "
                       f"through them about {self.epochs(self.planned_microbatches):,.0f} times")

    def after_step(self, state: TrainState) -> None:
        epochs = self.epochs(state.progress.microbatches)
        if not self.warned and epochs > MANY_EPOCHS:
            self._warn(f"step {state.progress.step} has gone through them {epochs:,.0f} times")

    def on_train_end(self, state: TrainState, reason: str) -> None:
        if self.warned:
            log.warning("the run went through its %s training rows %s times", f"{self.training_rows:,}",
                        f"{self.epochs(state.progress.microbatches):,.0f}")

    def _warn(self, what: str) -> None:
        self.warned = True
        log.warning("the data holds %s training rows and %s (%s): past %d epochs more passes are worth little; "
                    "give more data or a shorter budget", f"{self.training_rows:,}", what, self.data_setting,
                    MANY_EPOCHS)
