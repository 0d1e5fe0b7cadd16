"""Pretrain a crammed BERT under a budget in GPU-hours: `python pretrain.py` or `cramming-pretrain`.

    python pretrain.py budget=24 gpu=2080ti                       # the crammed recipe
    python pretrain.py --config-name quickstart                   # offline quick start on a CPU
    python scripts/launch.py --nproc_per_node=4 pretrain.py budget=24 gpu=a100   # torchrun, checked first
    python pretrain.py resume=latest                              # continue the newest run with its own config
    python pretrain.py budget=24 gpu=2080ti preflight=true        # check it all and print the plan; train nothing
    python pretrain.py -m train.optim.lr=5e-4,1e-3                # a Hydra sweep: one numbered job per value
"""

import logging
import os
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from cramming.cli import hydra_command, sweep_job_dir
from cramming.cli.resume import resumed_config
from cramming.preflight.checks import check_run, offline_if_unreachable
from cramming.preflight.plan import preflight
from cramming.pretraining import (  # registers the config schemas
    PretrainConfig,
    pretrain,
)
from cramming.threads import set_cpu_threads
from cramming.train.runs import FINAL
from cramming.train.settings import device_type

log = logging.getLogger(__name__)


def checked_job(cfg, overrides: list[str], config_name: str, world_size: int | None = None):
    """One job's config as it will train (a resume's: the run's own) after the whole-run check
    (cramming.preflight), which lists every problem in one line; preflight=true leaves the listing to the
    preflight."""
    if cfg.resume:  # the run's own config, before anything else
        cfg = resumed_config(cfg, overrides, config_name, world_size)
    if not cfg.preflight:
        check_run(cfg)
    return cfg


@hydra_command("pretrain", PretrainConfig, check_job=checked_job)  # its folders: checked with the rest (preflight)
def main(cfg: PretrainConfig) -> None:
    hydra = HydraConfig.get()
    cfg = checked_job(cfg, list(hydra.overrides.task), hydra.job.config_name,
                      int(os.environ.get("WORLD_SIZE", "1")))  # torchrun's
    if device_type(cfg) == "cpu":
        set_cpu_threads()
    if cfg.preflight:
        sys.exit(preflight(cfg))
    offline_if_unreachable(cfg)
    if job_dir := sweep_job_dir():  # a multirun job's run lives in the job's numbered directory
        cfg.output_dir = job_dir
    run_dir = pretrain(cfg)
    if int(os.environ.get("RANK", "0")) == 0:  # torchrun's other ranks say nothing more
        for line in next_steps(run_dir, glue_done=cfg.eval is not None, sweep_dir=job_dir and Path(job_dir).parent):
            log.info("next: %s", line)


def next_steps(run_dir: Path, glue_done: bool, sweep_dir: Path | None) -> list[str]:
    """What to run after a finished run, as commands to copy: GLUE on its final checkpoint (unless eval=glue
    scored it already) and its export; after a sweep's job, the sweep's table."""
    if sweep_dir is not None:
        return [f"python scripts/ablate.py multirun={sweep_dir}   # once every job has run: one table, one loss plot"]
    final = run_dir / "checkpoints" / FINAL
    glue = [f"python eval_glue.py ckpt={final}   # GLUE: its tasks from the hub, or eval.data_dir=<folder>"]
    return [*([] if glue_done else glue),
            f"python scripts/export.py ckpt={final} out=exported/{run_dir.parent.name}-{run_dir.name}   # for "
            "transformers"]


if __name__ == "__main__":
    main()
