"""The keys of the Hydra group `eval` that every task shares (GlueBaseConfig); every key is used, others are
rejected. The section's schema, GlueConfig, adds each task's own settings to them (cramming.eval.tasks.registry).

The defaults of the protocol fields are the fixed GLUE protocol of the Cramming paper; the report lists every
field that differs from them.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from cramming.errors import require
from cramming.eval.parameter_efficient import lora_settings

HF_PREFIX = "hf:"  # ckpt=hf:<hub id or folder>: a transformers encoder, not one of our checkpoints

DEFAULT_TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]


@dataclass
class GlueBaseConfig:
    """The keys every task shares; GlueConfig (cramming.eval.tasks.registry) adds the tasks' own."""

    # add "wnli" to run it too; "swag": SWAG multiple choice, "local": your own data (eval.local); SuperGLUE's
    # boolq, cb, copa, multirc, record, wic, wsc, axb, axg (eval=superglue) and race (eval=race): the same
    # protocol, all outside the GLUE average
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    # a classic GLUE TSV directory (SWAG: its SWAG/{train,val}.csv; SuperGLUE's folders and RACE/ beside GLUE's);
    # null: the hub (nyu-mll/glue, allenai/swag, aps/super_glue, ehovy/race)
    data_dir: Optional[str] = None
    seeds: list[int] = field(default_factory=lambda: [0])  # each task runs once per seed; median reported
    # --- protocol: one set of hyperparameters for every task ---
    lr: float = 4e-5
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-6
    weight_decay: float = 0.0  # applied to matrices only (never to norms or biases) when non-zero
    batch_size: int = 16
    epochs: int = 5
    warmup_fraction: float = 0.1  # linear warm-up over this fraction of the steps, then cosine decay to 0
    max_length: int = 128  # tokens per [CLS] a [SEP] b [SEP] example, longer ones are truncated
    dropout: float = 0.1
    max_train_examples: Optional[int] = None  # smoke runs only: a fixed random subset of each train split
    # true: batch examples of similar length together (less padding, faster), but the batches are not the
    # protocol's random ones, so it is reported as a deviation
    length_bucketing: bool = False
    # Parameter-efficient fine-tuning, a protocol of its own (docs/glue.md): null is full fine-tuning (the
    # protocol); lora freezes the pretrained weights and trains low-rank updates and the head. The peft_*
    # keys are for eval.peft=lora only (an error otherwise); null takes the default named beside each.
    peft: Optional[str] = None  # null | lora
    peft_rank: Optional[int] = None  # LoRA's rank r; null: 8
    peft_alpha: Optional[float] = None  # LoRA's update is scaled by alpha / r; null: 8
    peft_dropout: Optional[float] = None  # dropout on the input of LoRA's branch; null: 0
    # Linear layers that get LoRA, by name as peft matches them (the module's name or its end after a dot,
    # e.g. [qkv] or [query,value]); null: every Linear layer of the pretrained encoder
    peft_target_modules: Optional[list[str]] = None
    # --- execution: how the protocol is run (not reported as deviations) ---
    eval_batch_size: int = 128
    # torch.compile the fine-tuning and evaluation steps, batches padded to static widths (docs/glue.md);
    # null: on a GPU (where eager launch overhead idles it), not on the CPU (where inductor's step is slower)
    compile: Optional[bool] = None
    precision: str = "auto"  # auto (bf16 on GPUs that have it, else fp16; fp32 on CPU) | fp32 | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:<index>
    baseline: Optional[str] = None  # an earlier glue_results.json: its scores become a row of the report
    save_models: bool = False  # keep each fine-tuned classifier (transformers format) under <output_dir>/models/
    predict_test: bool = False  # GLUE-server submission files from the test splits: <output_dir>/glue_submission.zip
    # A requested task, evaluation split or (predict_test) test split without data is refused before any fine-tuning
    # (and at a pretraining run's start); true skips it, says so, and reports it as missing
    skip_missing: bool = False
    # Up to floor(fraction * rows) malformed rows of a task's file are skipped and reported; more are an error.
    max_malformed_fraction: float = 0.001

    def check(self) -> None:
        """Its own values, every problem. The task names and each task's own settings are the registry's to check
        (cramming.eval.tasks.registry.check_glue_config, which runs this first)."""
        require([
            (bool(self.seeds), "eval.seeds is empty; give at least one seed"),
            (len(self.betas) == 2 and all(0 <= beta < 1 for beta in self.betas),
             f"eval.betas={list(self.betas)} must be two numbers in [0, 1)"),
            (math.isfinite(self.lr) and self.lr > 0, f"eval.lr={self.lr} must be positive and finite"),
            (self.eps > 0 and self.weight_decay >= 0,
             f"eval.eps={self.eps} must be positive and eval.weight_decay={self.weight_decay} not negative"),
            (0 <= self.dropout < 1, f"eval.dropout={self.dropout} must be in [0, 1)"),
            *[(getattr(self, key) >= 1, f"eval.{key} must be at least 1, got {getattr(self, key)}")
              for key in ("batch_size", "eval_batch_size", "epochs", "max_length")],
            (self.max_train_examples is None or self.max_train_examples >= 1,
             f"eval.max_train_examples must be null or at least 1, got {self.max_train_examples}"),
            (0 <= self.warmup_fraction <= 1, f"eval.warmup_fraction must be in [0, 1], got {self.warmup_fraction}"),
        ])


PROTOCOL_FIELDS = (
    "lr", "betas", "eps", "weight_decay", "batch_size", "epochs", "warmup_fraction", "max_length", "dropout",
    "max_train_examples", "length_bucketing",
)  # fmt: skip


def protocol_deviations(cfg: GlueBaseConfig) -> dict[str, dict[str, Any]]:
    """{field: {"protocol": default, "used": value}} for every protocol field that was overridden; eval.peft
    as one entry `peft` describing all of its settings."""
    protocol = GlueBaseConfig()
    deviations = {}
    for name in PROTOCOL_FIELDS:
        used, default = getattr(cfg, name), getattr(protocol, name)
        if used != default:
            deviations[name] = {"protocol": default, "used": used}
    lora = lora_settings(cfg)
    if lora is not None:  # one entry with every LoRA setting, defaults included
        deviations["peft"] = {"protocol": None, "used": lora.describe()}
    return deviations
