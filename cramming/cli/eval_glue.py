"""Fine-tune a pretrained checkpoint on GLUE with the fixed protocol: `python eval_glue.py` or
`cramming-eval-glue`. Writes glue_results.{json,md}.

    python eval_glue.py ckpt=outputs/<name>/<timestamp>/checkpoints/final
    python eval_glue.py ckpt=latest eval.tasks=[rte,mrpc] eval.data_dir=<GLUE folder>
    python eval_glue.py ckpt=hf:bert-base-uncased          # any transformers encoder: hub id or local folder
    python eval_glue.py ckpt=latest 'eval.tasks=[swag]'     # SWAG multiple choice, beside the GLUE average
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING

from cramming.cli import hydra_command
from cramming.eval.config import HF_PREFIX
from cramming.eval.tasks.registry import GlueConfig  # registers the eval schema
from cramming.train.runs import RunStart, resolve_checkpoint

log = logging.getLogger(__name__)


@dataclass
class EvalGlueConfig:
    """Top level of `eval_glue.py`."""

    ckpt: str = MISSING  # a checkpoint dir, a pretraining run dir (its final or newest checkpoint), or latest
    eval: GlueConfig = MISSING
    runs_dir: str = "outputs"  # where `ckpt=latest` looks for the newest pretraining run
    output_dir: str = "outputs/glue/${now:%Y-%m-%d_%H-%M-%S}"  # glue_results.{json,md} and the log go here


ConfigStore.instance().store(name="eval_glue_schema", node=EvalGlueConfig)


@hydra_command("eval_glue", EvalGlueConfig, directories=("output_dir",))
def main(cfg: EvalGlueConfig) -> None:
    hydra = HydraConfig.get()
    output_dir = hydra.runtime.output_dir
    hydra_files = (hydra.output_subdir, f"{hydra.job.name}.log")  # what Hydra wrote there before this command
    with RunStart(hydra_files, Path(output_dir)) as start:  # a failed start leaves no outputs/glue/<ts>
        hub_or_folder = cfg.ckpt.startswith(HF_PREFIX)
        checkpoint = cfg.ckpt if hub_or_folder else resolve_checkpoint(cfg.ckpt, cfg.runs_dir, key="ckpt")
        if not hub_or_folder:  # which checkpoint latest, a run or a directory of runs meant
            log.info("ckpt=%s: %s", cfg.ckpt, checkpoint)
        # after the checkpoint is found: the GLUE stack (transformers, scikit-learn, ...) takes seconds to import,
        # and a missing or mistyped ckpt is one line without them
        from cramming.eval.run import run_glue  # noqa: PLC0415 -- the GLUE stack, once ckpt is found

        run_glue(cfg.eval, checkpoint, output_dir, on_start=start.done)


if __name__ == "__main__":
    main()
