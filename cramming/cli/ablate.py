"""Equal-budget ablations, one table: `python scripts/ablate.py` or `cramming-ablate`.

    python scripts/ablate.py sweep=smoke                       # seconds on a CPU: the wiring
    python scripts/ablate.py sweep=optimizers                  # every optimizer, 3 CPU minutes each
    python scripts/ablate.py sweep=optimizers 'overrides=["gpu=a100","budget=2"]'   # the same sweep on a GPU
"""

from cramming.ablate.sweep import AblateConfig, run_sweep  # registers the config schema
from cramming.cli import hydra_command


@hydra_command("ablate", AblateConfig, directories=("output_dir",))
def main(cfg: AblateConfig) -> None:
    run_sweep(cfg)


if __name__ == "__main__":
    main()
