"""Knowledge distillation from a pretrained teacher: `train.distill.teacher=<checkpoint>` (Hinton et al.,
2015, "Distilling the Knowledge in a Neural Network"; for BERT, Sanh et al., 2019, "DistilBERT").

Each microbatch also runs through the teacher (eval mode, no gradient, the run's precision); the loss
becomes (1 - alpha) * MLM loss + alpha * T^2 * KL(teacher || student) over the masked positions, both
distributions softened by the temperature T. The teacher's forward pass runs inside the step, so the
budget clock charges it: "overparameterize, then compress" pays for the big model's time. The teacher
must share the student's tokenizer (checked). The checkpoint keeps which teacher checkpoint it was, so a
resumed run continues exactly. With importance sampling the KL term is importance-weighted too.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from cramming.data.mlm import IGNORE_INDEX, labels_at_logits, logits_at_masks
from cramming.data.prepare import cached_tokenizer
from cramming.data.tokenizer import load_tokenizer
from cramming.errors import CrammingError, require
from cramming.model.checkpoint import WEIGHTS_NAME, load_pretrained, read_config, read_tokenizer
from cramming.model.crammed_bert import CrammedForMaskedLM
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.runs import resolve_checkpoint
from cramming.train.techniques.base import RunContext, Technique

log = logging.getLogger("pretrain")


@dataclass
class DistillConfig:
    """`train.distill`: knowledge distillation from a trained teacher; off without one."""

    teacher: Optional[str] = None  # a checkpoint or run directory of a model pretrained on the same tokenizer
    alpha: float = 0.5  # loss = (1 - alpha) * MLM loss + alpha * KL(teacher || student) at the masked positions
    temperature: float = 2.0  # both distributions softened by it; the KL term is multiplied by its square


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                      temperature: float, row_weights: torch.Tensor | None = None) -> torch.Tensor:
    """T^2 * KL(teacher || student) per predicted token, averaged over labels != IGNORE_INDEX, each row's
    tokens weighted by row_weights (importance sampling's) if given. Logits (B, k, V), labels (B, k)."""
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    per_token = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)  # (B, k)
    counted = (labels != IGNORE_INDEX).float()
    weighted = counted if row_weights is None else counted * row_weights.to(counted.dtype)[:, None]
    return temperature**2 * (per_token * weighted).sum() / counted.sum().clamp(min=1)


class Distillation(Technique):
    name, override = "distillation", "train.distill"
    switch = "train.distill.teacher"
    settings = (Setting("train.distill", DistillConfig),)

    def __init__(self, teacher: Path, alpha: float, temperature: float):
        self.teacher_path, self.alpha, self.temperature = teacher, alpha, temperature
        self.teacher: CrammedForMaskedLM | None = None

    @classmethod
    def check(cls, cfg) -> None:
        distill = cfg.train.distill
        require([
            (distill.teacher != "latest", "train.distill.teacher=latest would pick this run's own checkpoints: "
             "give the teacher's run or checkpoint directory"),
            (0 <= distill.alpha <= 1, f"train.distill.alpha={distill.alpha} must be in [0, 1]"),
            (distill.temperature > 0, f"train.distill.temperature={distill.temperature} must be positive"),
        ])

    @staticmethod
    def check_inputs(cfg) -> None:
        """A masked-LM teacher whose vocabulary is this run's: its size from its config.json, its tokens from the
        prepared dataset's tokenizer where the cache holds it (else once the data is prepared: on_train_start)."""
        key = f"train.distill.teacher={cfg.train.distill.teacher}"
        teacher = resolve_checkpoint(cfg.train.distill.teacher, Path(cfg.output_dir) / cfg.name,
                                     key="train.distill.teacher")
        meta, _ = read_config(teacher)
        if meta["task"] != "masked-lm":
            raise CrammingError(f"{key} is a classifier, not a masked-LM model")
        tokenizer = cfg.data.tokenizer
        if tokenizer.kind != "pretrained" and meta["vocab_size"] != tokenizer.vocab_size:
            raise CrammingError(f"{key}: its vocabulary has {meta['vocab_size']} tokens and this run's "
                                f"data.tokenizer.vocab_size={tokenizer.vocab_size}: the teacher must share the "
                                "student's tokenizer; distill on the data the teacher was pretrained on")
        ours = cached_tokenizer(OmegaConf.to_object(cfg.data) if OmegaConf.is_config(cfg.data) else cfg.data,
                                str(cfg.cache_dir))
        if ours is not None and load_tokenizer(ours).get_vocab() != read_tokenizer(teacher).get_vocab():
            raise CrammingError(f"{key} was trained with another tokenizer than this dataset's: distill on the data "
                                "the teacher was pretrained on")

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Distillation":
        distill = cfg.train.distill
        teacher = resolve_checkpoint(distill.teacher, Path(cfg.output_dir) / cfg.name, key="train.distill.teacher")
        return cls(teacher, distill.alpha, distill.temperature)

    def extra_memory(self, model: torch.nn.Module) -> int:
        """The teacher's weights, as stored (its activations are freed before the student's backward)."""
        return (self.teacher_path / WEIGHTS_NAME).stat().st_size

    def on_train_start(self, state: TrainState) -> None:
        teacher, tokenizer = load_pretrained(self.teacher_path)
        if not isinstance(teacher, CrammedForMaskedLM):
            raise CrammingError(f"train.distill.teacher={self.teacher_path} is a classifier, not a masked-LM model")
        if state.tokenizer is not None and tokenizer.get_vocab() != state.tokenizer.get_vocab():
            raise CrammingError(f"train.distill.teacher={self.teacher_path} was trained with another tokenizer "
                                "than this dataset's: distill on the data the teacher was pretrained on")
        self.teacher = teacher.to(state.device).requires_grad_(False)

    def state_dict(self) -> dict:
        return {"teacher": str(self.teacher_path)}

    def load_state_dict(self, state: dict) -> None:
        """A resumed run keeps the checkpoint its teacher was (a teacher run that trained on since would
        resolve to a later one)."""
        if Path(state["teacher"]) != self.teacher_path:
            log.info("distillation: resuming with the teacher %s (train.distill.teacher now names %s)",
                     state["teacher"], self.teacher_path)
        self.teacher_path = Path(state["teacher"])

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        positions = batch["masked_positions"]  # (B, k)
        student = logits_at_masks(batch, output.logits)  # (B, k, V)
        labels = labels_at_logits(batch, student)  # (B, k)
        precision = output.logits.dtype  # the run's autocast dtype (float32 without autocast)
        with torch.no_grad(), torch.autocast(state.device.type, dtype=precision, enabled=precision != torch.float32):
            teacher = self.teacher(batch["input_ids"], masked_positions=positions).logits
        teacher = logits_at_masks(batch, teacher)  # (B, k, V), also from a teacher without sparse prediction
        kl = distillation_loss(student, teacher, labels, self.temperature, batch.get("sample_weights"))
        return (1 - self.alpha) * loss + self.alpha * kl
