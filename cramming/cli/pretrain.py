"""Pretrain a crammed BERT under a budget in GPU-hours: `python pretrain.py` or `cramming-pretrain`.

    python pretrain.py budget=24 gpu=2080ti                       # the crammed recipe
    python pretrain.py --config-name quickstart                   # offline quick start on a CPU
    torchrun --nproc_per_node=4 pretrain.py budget=24 gpu=a100    # budget stays in GPU-hours
    python pretrain.py resume=latest                              # continue the newest run exactly
"""

import hydra

from cramming import CONFIG_DIR
from cramming.cli import quote_path_overrides
from cramming.errors import exit_on_user_error
from cramming.train.config import PretrainConfig  # registers the config schemas


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="pretrain")
@exit_on_user_error
def _pretrain(cfg: PretrainConfig) -> None:
    from cramming.train.trainer import pretrain

    pretrain(cfg)


def main() -> None:
    quote_path_overrides()
    _pretrain()


if __name__ == "__main__":
    main()
