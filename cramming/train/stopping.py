"""When training stops, and how far along it is (the progress f that drives the schedules)."""

from dataclasses import dataclass

from cramming.train.clock import BudgetClock


@dataclass
class StoppingRule:
    """By the budget clock (train.progress=budget: f is the elapsed fraction of the budget) or by steps
    (progress=steps: f = step / max_steps). The clock stops a run either way; train.max_steps too."""

    progress: str  # budget | steps
    max_steps: int | None
    clock: BudgetClock

    def fraction(self, step: int) -> float:
        if self.progress == "steps":
            return min(step / self.max_steps, 1.0)
        return self.clock.fraction

    def at_max_steps(self, step: int) -> bool:
        return self.max_steps is not None and step >= self.max_steps

    def done(self, step: int) -> bool:
        return self.fraction(step) >= 1.0 or self.clock.expired() or self.at_max_steps(step)

    def reason(self, step: int) -> str:
        return "max_steps" if self.at_max_steps(step) else "budget"
