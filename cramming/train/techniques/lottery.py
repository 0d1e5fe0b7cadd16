"""Where `train.sparsity.method=lottery` finds its ticket: the dense run's final checkpoint, and the kept
checkpoint its surviving weights rewind to."""

from pathlib import Path

from omegaconf import OmegaConf

from cramming.errors import CrammingError
from cramming.runs import CONFIG_FILE, FINAL, resolve_checkpoint, run_config


def lottery_ticket(cfg) -> tuple[Path, Path | None]:
    """The dense run's final checkpoint (the mask) and the checkpoint to rewind to (None: the initialization,
    which the dense run's seed and arch rebuild: both must be this run's)."""
    sparsity = cfg.train.sparsity
    final = resolve_checkpoint(sparsity.ticket, Path(cfg.output_dir) / cfg.name, key="train.sparsity.ticket")
    run_dir = final.parent.parent
    if final.name != FINAL or not (run_dir / CONFIG_FILE).is_file():
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: {final} is not the final checkpoint of a "
                            "finished run (the ticket is the dense run's trained weights)")
    dense = run_config(run_dir)
    ours = OmegaConf.to_container(cfg.arch, resolve=True)
    if OmegaConf.to_container(dense.arch, resolve=True) != ours:
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's arch differs from this one's: "
                            "the ticket must be drawn from the same architecture")
    if sparsity.rewind is None:
        if dense.train.seed != cfg.train.seed:
            raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's train.seed={dense.train.seed} "
                                f"differs from this one's ({cfg.train.seed}), so this run's initialization is not "
                                "the ticket's: use the same seed, or rewind to a kept checkpoint")
        return final, None
    kept = sorted((run_dir / "checkpoints").glob(f"at-{sparsity.rewind:g}-step-*"))
    if not kept:
        raise CrammingError(f"train.sparsity.rewind={sparsity.rewind}: {run_dir} kept no checkpoint at that "
                            f"progress; train the dense run with checkpoint.keep_at=[{sparsity.rewind:g}]")
    return final, kept[-1]
