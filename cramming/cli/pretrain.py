"""Pretrain a crammed BERT under a budget in GPU-hours: `python pretrain.py` or `cramming-pretrain`.

    python pretrain.py budget=24 gpu=2080ti                       # the crammed recipe
    python pretrain.py --config-name quickstart                   # offline quick start on a CPU
    python scripts/launch.py --nproc_per_node=4 pretrain.py budget=24 gpu=a100   # torchrun, checked first
    python pretrain.py resume=latest                              # continue the newest run with its own config
    python pretrain.py -m train.optim.lr=5e-4,1e-3                # a Hydra sweep: one numbered job per value
"""

import os

from hydra.core.hydra_config import HydraConfig

from cramming.cli import hydra_command, sweep_job_dir
from cramming.train.config import PretrainConfig  # registers the config schemas


DIRECTORIES = ("output_dir", "cache_dir")  # what the run writes in


@hydra_command("pretrain", PretrainConfig, directories=DIRECTORIES)
def main(cfg: PretrainConfig) -> None:
    from cramming.cli.resume import resumed_config
    from cramming.threads import set_cpu_threads
    from cramming.train.settings import device_type
    from cramming.train.trainer import pretrain

    if cfg.resume:  # the run's own config, before anything else
        hydra = HydraConfig.get()
        world_size = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
        cfg = resumed_config(cfg, list(hydra.overrides.task), hydra.job.config_name, world_size)
    if device_type(cfg) == "cpu":
        set_cpu_threads()
    if job_dir := sweep_job_dir():  # a multirun job's run lives in the job's numbered directory
        cfg.output_dir = job_dir
    pretrain(cfg)


if __name__ == "__main__":
    main()
