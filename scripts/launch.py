"""torchrun with the pretraining command checked before any process starts (the work: cramming.cli.launch).

    python scripts/launch.py --nproc_per_node=4 pretrain.py budget=24 gpu=a100
"""

from cramming.cli.launch import main

if __name__ == "__main__":
    main()
