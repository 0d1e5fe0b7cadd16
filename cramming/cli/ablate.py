"""Equal-budget ablations, one table: `python scripts/ablate.py` or `cramming-ablate`.

    python scripts/ablate.py sweep=smoke                       # seconds on a CPU: the wiring
    python scripts/ablate.py sweep=optimizers                  # every optimizer, 3 CPU minutes each
    python scripts/ablate.py sweep=optimizers 'overrides=["gpu=a100","budget=2"]'   # the same sweep on a GPU
    python scripts/ablate.py multirun=outputs/multirun/<time>  # the table of a finished `pretrain.py -m` sweep
"""

from omegaconf import OmegaConf

from cramming.ablate.multirun import tabulate_multirun
from cramming.ablate.sweep import AblateConfig, run_sweep  # registers the config schema
from cramming.cli import hydra_command
from cramming.errors import CrammingError


@hydra_command("ablate", AblateConfig, directories=("output_dir",))
def main(cfg: AblateConfig) -> None:
    named = not OmegaConf.is_missing(cfg, "sweep")
    if named and cfg.multirun is not None:
        raise CrammingError("sweep=<name> runs a sweep, multirun=<directory> tables a finished one: give one")
    if not named and cfg.multirun is None:
        raise CrammingError("You must specify 'sweep', e.g, sweep=<OPTION>, or multirun=<a pretrain.py -m directory>")
    if named:
        run_sweep(cfg)
    else:
        tabulate_multirun(cfg.multirun, cfg.output_dir)


if __name__ == "__main__":
    main()
