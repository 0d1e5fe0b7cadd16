"""Pretraining as the `pretrain.py` job: its config (the top level, holding the model, the data, the training
and the end-of-run GLUE), checked whole; the training (cramming.train); then what runs after it, outside the
budget: GLUE fine-tuning of the final checkpoint (eval=glue). It sits above training and evaluation, so that
neither imports the other: the zero-shot probe at the validation points is evaluation's, handed to the trainer
from here."""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from cramming.data.sources import DataConfig, check_data_config
from cramming.engine.hardware import GpuProfile, check_budget
from cramming.errors import problems_of, raise_problems, require
from cramming.eval.probe import ZeroShotProbe
from cramming.eval.tasks.registry import GlueConfig, as_glue_config, check_glue_config
from cramming.model.config import ModelConfig, as_model_config
from cramming.train.callbacks import Callback
from cramming.train.config import CheckpointConfig, ImplConfig, LoggingConfig, TrainConfig, WandbConfig
from cramming.train.runs import FINAL, check_run_name
from cramming.train.techniques import check_techniques, fill_arch_needs

if TYPE_CHECKING:
    from cramming.train.trainer import Trained

BUDGET_SCALINGS = ("none", "peak")  # cramming.engine.hardware.budget_seconds

log = logging.getLogger("pretrain")


@dataclass
class PretrainConfig:
    """Top level of `pretrain.py`."""

    name: str = "${arch.name}"  # the run's directory: <output_dir>/<name>/<timestamp>
    budget: float = 24.0  # GPU-hours; under torchrun the wall-clock budget is budget / world size
    budget_scaling: str = "none"  # none | peak: run for the time that matches the profile's peak FLOPs x budget
    resume: Optional[str] = None  # a checkpoint dir, a run dir, or "latest"
    # true: check the run, read the data source's first records, try one microbatch and print the plan, then
    # exit (0: it would start cleanly; 2: every problem listed); nothing is prepared, trained or written
    preflight: bool = False
    output_dir: str = "outputs"
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"
    arch: ModelConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = MISSING
    gpu: GpuProfile = MISSING
    impl: ImplConfig = field(default_factory=ImplConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    wandb: WandbConfig = MISSING
    eval: Optional[GlueConfig] = None  # eval=glue: fine-tune and score on GLUE after pretraining (outside the budget)

    def check(self) -> None:
        """Every problem of every part, in one line."""
        raise_problems(list(dict.fromkeys(problem for found in self.part_problems().values() for problem in found)))

    def part_problems(self) -> dict[str, list[str]]:
        """Each part's own problems, by part: the run's name, the budget, each section, the rules across sections,
        the end-of-run GLUE's and the techniques'; one part's problem does not hide another's, and the start
        (cramming.preflight) runs what reads a part only where that part holds."""
        checks = {
            "name": self._check_name, "budget": self._check_budget,
            "data": lambda: check_data_config(self.data), "arch": lambda: as_model_config(self.arch),
            "train": self.train.check, "impl": self.impl.check, "microbatch": self._check_microbatch,
            "across": self._check_across_parts, "checkpoint": self.checkpoint.check, "logging": self.logging.check,
            "wandb": self.wandb.check, "eval": self._check_eval, "techniques": lambda: check_techniques(self),
        }
        return {part: problems_of(check) for part, check in checks.items()}

    def _check_name(self) -> None:
        if not self.resume:  # a resume goes on in its run's own folder, whatever its name (see cli.resume)
            check_run_name(self.name)

    def _check_budget(self) -> None:
        raise_problems(problems_of(lambda: check_budget(self.budget), lambda: require([
            (self.budget_scaling in BUDGET_SCALINGS, f"budget_scaling={self.budget_scaling!r} must be none or peak")])))

    def _check_across_parts(self) -> None:
        """The rules that read two sections, each once the values it reads are in their own domains."""
        train, positions, seq_length = self.train, self.arch.max_position_embeddings, self.data.seq_length
        masked = round(train.mlm_rate * seq_length)
        require([
            (not self.impl.deterministic or train.progress == "steps",
             "impl.deterministic=true needs train.progress=steps (e.g. train=steps): a budget-driven schedule follows "
             "the wall clock, which no two runs share"),
            (seq_length < 2 or (0 < train.mlm_rate < 1 and 1 <= masked < seq_length),
             f"train.mlm_rate={train.mlm_rate} must mask 1 to {seq_length - 1} of {seq_length} tokens"),
            (positions < 1 or seq_length <= positions,
             f"data.seq_length={seq_length} exceeds arch.max_position_embeddings={positions}"),
            (train.validation.early_stop_fraction is None or self.data.validation_rows > 0,
             "train.validation.early_stop_* needs a validation slice: data.validation_rows is 0"),
        ])

    def _check_microbatch(self) -> None:
        microbatch, batch = self.impl.microbatch_size, self.train.batch_size
        require([(microbatch is None or batch < 1 or microbatch <= batch,
                  f"impl.microbatch_size={microbatch} exceeds train.batch_size={batch}: a step would train more "
                  "sequences than its batch; make the microbatch at most the batch")])

    def _check_eval(self) -> None:
        if self.eval is not None:
            check_glue_config(as_glue_config(self.eval))


def check_pretrain_config(cfg) -> None:
    """Every value of a composed pretraining config in its domain, before any data is prepared."""
    (cfg if isinstance(cfg, PretrainConfig) else OmegaConf.to_object(cfg)).check()


ConfigStore.instance().store(name="pretrain_schema", node=PretrainConfig)


def pretrain(cfg, callbacks: Sequence[Callback] = ()) -> Path:
    """Check the config, train under the budget, then (eval=glue, on rank 0) score the final checkpoint on GLUE;
    returns the run directory (with checkpoints/final on success). callbacks: as cramming.train.trainer.train."""
    from cramming.train.trainer import train  # noqa: PLC0415 -- matplotlib: a second at every command start

    fill_arch_needs(cfg)  # e.g. the decoder's bias of train.unigram_bias, where the arch leaves it open
    check_pretrain_config(cfg)
    trained = train(cfg, callbacks, zero_shot=ZeroShotProbe)
    try:
        if cfg.eval is not None and trained.is_main:
            evaluate_on_glue(cfg, trained)
    finally:
        if trained.wandb is not None:
            trained.wandb.finish(failed=trained.stop_reason not in ("budget", "max_steps"))
    return trained.run_dir


def evaluate_on_glue(cfg, trained: "Trained") -> None:
    """eval=glue: score the final checkpoint on GLUE (outside the budget); the score joins the summary."""
    from cramming.eval.run import run_glue  # noqa: PLC0415 -- fine-tuning's transformers: seconds at every start
    from cramming.train.summary import write_summary  # noqa: PLC0415 -- matplotlib: not at every command start

    run_dir, summary = trained.run_dir, trained.summary
    log.info("GLUE evaluation of the final checkpoint (outside the budget)")
    results = run_glue(cfg.eval, run_dir / "checkpoints" / FINAL, run_dir / "glue")
    summary["glue_score"] = results["glue_score"]
    write_summary(run_dir / "summary.json", summary)
    trained.wandb.summary({"score": results["glue_score"], **{f"{split}/{metric}": value for split, scores
                           in results["scores"].items() for metric, value in scores.items()}}, prefix="glue/")
