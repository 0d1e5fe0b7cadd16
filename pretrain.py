"""Pretrain a crammed BERT under a budget in GPU-hours.

    python pretrain.py budget=24 gpu=2080ti                       # the crammed recipe
    python pretrain.py data=embedded arch=crammed-bert-tiny budget=0.02 gpu=cpu   # offline quick start
    torchrun --nproc_per_node=4 pretrain.py budget=24 gpu=a100    # budget stays in GPU-hours
    python pretrain.py resume=latest                              # continue the newest run exactly
"""

import hydra

from cramming.cli import quote_path_overrides
from cramming.errors import exit_on_user_error
from cramming.train.config import PretrainConfig  # registers the config schemas
from cramming.train.trainer import pretrain


@hydra.main(version_base="1.3", config_path="configs", config_name="pretrain")
@exit_on_user_error
def main(cfg: PretrainConfig) -> None:
    pretrain(cfg)


if __name__ == "__main__":
    quote_path_overrides()
    main()
