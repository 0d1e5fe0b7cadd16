"""Pretrain a crammed BERT under a budget in GPU-hours (the entry point: cramming.cli.pretrain).

    python pretrain.py budget=24 gpu=2080ti                       # the crammed recipe
    python pretrain.py --config-name quickstart                   # offline quick start on a CPU
    torchrun --nproc_per_node=4 pretrain.py budget=24 gpu=a100    # budget stays in GPU-hours
    python pretrain.py resume=latest                              # continue the newest run exactly
"""

from cramming.cli.pretrain import main

if __name__ == "__main__":
    main()
