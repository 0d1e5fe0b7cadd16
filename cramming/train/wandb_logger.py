"""Weights & Biases for a run (rank 0): the resolved config, every metrics record, GLUE and the summary.

`wandb=disabled` (the default) never imports wandb; `wandb=offline` needs no account and writes the W&B
run inside the run directory (<run>/wandb), to upload later with `wandb sync`.
"""

import hashlib
from pathlib import Path

from omegaconf import OmegaConf

from cramming.errors import CrammingError


class WandbLogger:
    def __init__(self, cfg, run_dir: Path):
        mode = cfg.wandb.mode
        self.run = None
        if mode == "disabled":
            return
        import wandb

        try:
            self.run = wandb.init(
                project=cfg.wandb.project,
                entity=cfg.wandb.entity,
                mode=mode,
                dir=run_dir,
                name=f"{cfg.name}/{run_dir.name}",
                id=hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16],  # a resume continues it
                resume="allow",
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        except wandb.errors.Error as error:  # no API key, no network, no such entity
            raise CrammingError(
                f"wandb={mode}: W&B did not start ({error}); run `wandb login`, or use wandb=offline"
            ) from None

    def log(self, record: dict) -> None:
        if self.run is not None:
            self.run.log({key: value for key, value in record.items() if value is not None and key != "step"},
                         step=record["step"])

    def summary(self, values: dict, prefix: str = "") -> None:
        """Add run-level results (the run summary, GLUE scores) to the W&B run's summary."""
        if self.run is not None:
            self.run.summary.update({f"{prefix}{key}": value for key, value in values.items() if value is not None})

    def finish(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
