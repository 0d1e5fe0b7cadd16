"""Fine-tune a pretrained checkpoint on GLUE and write glue_results.{json,md}.

    python eval_glue.py ckpt=outputs/<name>/<timestamp>/checkpoints/final
    python eval_glue.py ckpt=latest eval.tasks=[rte,mrpc] eval.data_dir=../shared/data/glue
"""

import hydra
from hydra.core.hydra_config import HydraConfig

import cramming.eval.config  # noqa: F401  (registers the schemas with Hydra's ConfigStore)
from cramming.errors import exit_on_user_error
from cramming.eval.checkpoint import resolve_checkpoint
from cramming.eval.run import run_glue


@hydra.main(version_base="1.3", config_path="configs", config_name="eval_glue")
@exit_on_user_error  # inside hydra.main, which would otherwise print the error with a traceback
def main(cfg) -> None:
    checkpoint = resolve_checkpoint(cfg.ckpt, cfg.runs_dir)
    run_glue(cfg.eval, checkpoint, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
