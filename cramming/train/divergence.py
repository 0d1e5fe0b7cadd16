"""What a diverged run tells its user: the setting that likely caused it, and where to go on from."""

from pathlib import Path

SUSPECT_INIT_STD = 0.2  # ten times the recipe's N(0, 0.02): the logits overflow within the first steps
RECIPE_INIT_STD = 0.02


def resume_advice(last_good: Path | None, cfg) -> str:
    """An init far above the recipe's is blamed first (a lower lr cannot save it); otherwise the learning
    rate: from the last good checkpoint with a lower one, or from the start."""
    init_std = getattr(cfg.arch, "init_std", None)
    if init_std is not None and init_std >= SUSPECT_INIT_STD:
        return (f"arch.init_std={init_std:g} is far above the recipe's {RECIPE_INIT_STD} and the likely cause: "
                "start again with a smaller arch.init_std")
    if last_good is None:
        return "no checkpoint was written before it diverged: start again with a lower train.optim.lr"
    return (f"the last good checkpoint is {last_good}; to go on from it with a lower learning rate, run the same "
            f"command with resume={last_good} train.optim.lr=<lower>")
