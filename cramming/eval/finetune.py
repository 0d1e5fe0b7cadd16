"""Fine-tune one fresh classifier on one task with the global hyperparameters, scoring every epoch."""

import logging
import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

import torch

from cramming.errors import CrammingError
from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit, collate, evaluation_batches, training_batches
from cramming.eval.config import GlueConfig

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Runtime:
    device: torch.device
    precision: str  # fp32 | bf16 | fp16 (autocast dtype)

    def autocast(self) -> AbstractContextManager:
        dtype = PRECISIONS[self.precision]
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)


def resolve_runtime(device: str, precision: str) -> Runtime:
    """`auto` picks the GPU when there is one, and bf16 autocast there (fp16 on GPUs without bf16)."""
    try:
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        resolved = torch.device(device)
    except RuntimeError:
        raise CrammingError(f"eval.device={device!r} is not auto, cpu, cuda or cuda:<index>") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CrammingError(f"eval.device={device} but no CUDA GPU is available")
    if precision == "auto":
        if resolved.type != "cuda":
            precision = "fp32"
        else:
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision not in PRECISIONS:
        raise CrammingError(f"eval.precision={precision!r} is unknown; choose auto, {', '.join(PRECISIONS)}")
    return Runtime(resolved, precision)


def warmup_cosine(step: int, total_steps: int, warmup_steps: int) -> float:
    """Learning-rate multiplier: linear warm-up to 1, then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def build_optimizer(model: torch.nn.Module, cfg: GlueConfig) -> torch.optim.AdamW:
    """AdamW; weight decay (if any) on matrices only, never on norms and biases (split by tensor rank)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)


def finetune(
    classifier: torch.nn.Module,
    train: EncodedSplit,
    evaluations: dict[str, EncodedSplit],
    cfg: GlueConfig,
    runtime: Runtime,
    seed: int,
    pad_id: int,
    describe: str,
) -> list[dict]:
    """Train for cfg.epochs epochs; after each, score every evaluation split. Returns one record per epoch."""
    classifier.to(runtime.device)
    optimizer = build_optimizer(classifier, cfg)
    total_steps = cfg.epochs * math.ceil(len(train) / cfg.batch_size)
    warmup_steps = round(cfg.warmup_fraction * total_steps)
    schedule = partial(warmup_cosine, total_steps=total_steps, warmup_steps=warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    scaler = torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16")
    generator = torch.Generator().manual_seed(seed)

    history = []
    for epoch in range(1, cfg.epochs + 1):
        started = time.perf_counter()
        classifier.train()
        loss_sum = torch.zeros((), device=runtime.device)
        batches = training_batches(train, cfg.batch_size, generator, cfg.length_bucketing)
        for indices in batches:
            batch = _to_device(collate(train, indices, pad_id), runtime.device)
            with runtime.autocast():
                loss = classifier(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            loss_sum += loss.detach().float()
        train_loss = (loss_sum / len(batches)).item()
        scores = {
            name: evaluate(classifier, split, name, cfg.eval_batch_size, runtime, pad_id)
            for name, split in evaluations.items()
        }
        seconds = time.perf_counter() - started
        history.append({"epoch": epoch, "train_loss": train_loss, "scores": scores, "seconds": seconds})
        log.info(
            "%s epoch %d/%d: train loss %.4f, %s (%.1f s)",
            describe, epoch, cfg.epochs, train_loss, metrics.format_scores(scores), seconds,
        )
    return history


@torch.inference_mode()
def evaluate(
    classifier: torch.nn.Module,
    split: EncodedSplit,
    name: str,
    batch_size: int,
    runtime: Runtime,
    pad_id: int,
) -> dict[str, float]:
    """Scores of the classifier on one evaluation split (dropout off)."""
    classifier.eval()
    order, outputs = [], []
    for indices in evaluation_batches(split, batch_size):
        batch = _to_device(collate(split, indices, pad_id), runtime.device)
        with runtime.autocast():
            logits = classifier(batch["input_ids"], batch["attention_mask"]).logits  # (B, num_labels)
        order += indices
        outputs.append(logits.float().cpu())
    in_split_order = torch.empty_like(torch.cat(outputs))
    in_split_order[torch.tensor(order)] = torch.cat(outputs)
    return metrics.score(name, in_split_order.numpy(), split.labels.numpy())


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}
