"""When training stops, and how far along it is (the progress f that drives the schedules)."""

from dataclasses import dataclass, field

from cramming.train.clock import BudgetClock
from cramming.train.interrupt import GracefulStop


@dataclass
class StoppingRule:
    """By the budget clock (train.progress=budget: f is the elapsed fraction of the budget) or by steps
    (progress=steps: f = step / max_steps). The clock stops a run either way; train.max_steps too; and a
    signal (Ctrl-C, SIGTERM) after the step it arrives in."""

    progress: str  # budget | steps
    max_steps: int | None
    clock: BudgetClock
    interrupt: GracefulStop = field(default_factory=GracefulStop)
    early_stop: str | None = None  # why the validation curve stopped the run (train.validation.early_stop_*)

    def stop_early(self, why: str) -> None:
        self.early_stop = why

    def fraction(self, step: int) -> float:
        if self.progress == "steps":
            return min(step / self.max_steps, 1.0)
        return self.clock.fraction

    def at_max_steps(self, step: int) -> bool:
        return self.max_steps is not None and step >= self.max_steps

    def done(self, step: int) -> bool:
        return (self.fraction(step) >= 1.0 or self.clock.expired() or self.at_max_steps(step)
                or self.interrupt.requested or self.early_stop is not None)

    def reason(self, step: int) -> str:
        if self.interrupt.requested:
            return "interrupted"
        if self.early_stop is not None:
            return "early_stop"
        return "max_steps" if self.at_max_steps(step) else "budget"
