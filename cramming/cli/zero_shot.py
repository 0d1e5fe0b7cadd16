"""Score any checkpoint zero-shot: BLiMP minimal pairs by pseudo-log-likelihood and bits per character, no
fine-tuning: `python scripts/zero_shot.py` or `cramming-zero-shot`. Writes zero_shot_results.{json,md}.

    python scripts/zero_shot.py ckpt=latest blimp_dir=<BLiMP folder>
    python scripts/zero_shot.py ckpt=outputs/<name>/<timestamp> blimp_dir=blimp pairs_per_paradigm=100
    python scripts/zero_shot.py ckpt=hf:bert-base-uncased text_file=held_out.txt   # BLiMP from the hub
"""

import logging

from hydra.core.hydra_config import HydraConfig

from cramming.cli import hydra_command
from cramming.eval.config import HF_PREFIX
from cramming.eval.zero_shot import (  # registers the config schema
    ZeroShotConfig,
    check,
    run_zero_shot,
)
from cramming.train.runs import resolve_checkpoint

log = logging.getLogger(__name__)


@hydra_command("zero_shot", ZeroShotConfig, directories=("output_dir",))
def main(cfg: ZeroShotConfig) -> None:
    check(cfg)
    hub_or_folder = cfg.ckpt.startswith(HF_PREFIX)
    checkpoint = cfg.ckpt if hub_or_folder else resolve_checkpoint(cfg.ckpt, cfg.runs_dir, key="ckpt")
    if not hub_or_folder:
        log.info("ckpt=%s: %s", cfg.ckpt, checkpoint)
    run_zero_shot(cfg, str(checkpoint), HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
