"""Fine-tune one fresh classifier on one task with the global hyperparameters, scoring every epoch."""

import contextlib
import logging
import math
import time
from typing import Callable

import numpy as np
import torch

from cramming.engine.adamw import build_optimizer
from cramming.errors import CrammingError
from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit, collate, evaluation_batches, filled, training_batches
from cramming.eval.compiled import CompiledClassifier, compiles, fresh_graphs
from cramming.eval.config import GlueBaseConfig
from cramming.engine.precision import Precision
from cramming.engine.step import Step, StepState
from cramming.engine.schedules import lr_multiplier
from cramming.phase_progress import PhaseProgress

log = logging.getLogger(__name__)


def finetune(
    classifier: torch.nn.Module,
    train: EncodedSplit,
    evaluations: dict[str, EncodedSplit],
    cfg: GlueBaseConfig,
    device: torch.device,
    precision: Precision,
    seed: int,
    pad_id: int,
    describe: str,
    score: Callable[[np.ndarray, np.ndarray, list | None], dict[str, float]],
) -> list[dict]:
    """Train for cfg.epochs epochs; after each, score every evaluation split (`score`: the task's, of the
    outputs and the labels). Returns one record per epoch.

    The learning rate follows the shared warm-up + cosine schedule over the optimizer steps. Compiled
    (eval.compile, cramming.eval.compiled), the batches are padded to static widths.
    """
    classifier.to(device)
    compiled, batch_sizes = compiles(cfg.compile, device), (cfg.batch_size, cfg.eval_batch_size)
    with fresh_graphs() if compiled else contextlib.nullcontext():
        network = CompiledClassifier(classifier, batch_sizes, cfg.max_length) if compiled else None
        return _finetune(classifier, network, train, evaluations, cfg, device, precision, seed, pad_id, describe,
                         score)


def _finetune(classifier, network: CompiledClassifier | None, train, evaluations, cfg, device, precision, seed,
              pad_id, describe, score) -> list[dict]:
    optimizer = build_optimizer(classifier, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    total_steps = cfg.epochs * math.ceil(len(train) / cfg.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier("cosine", step / total_steps, cfg.warmup_fraction))
    generator = torch.Generator().manual_seed(seed)
    # the training step every trainer runs (cramming.engine.step), with the GLUE protocol's plain AdamW: no
    # clipping and no skip
    step = Step(network or classifier, optimizer, precision.grad_scaler(), precision, iter(()), skip_nonfinite=False)
    state = StepState(model=classifier, device=device)

    history, static_up_to = [], network and network.max_length
    for epoch in range(1, cfg.epochs + 1):
        started = time.perf_counter()
        classifier.train()
        loss_sum = torch.zeros((), device=device)
        batches = training_batches(train, cfg.batch_size, generator, cfg.length_bucketing)
        step.batches = (collate(train, indices, pad_id, static_up_to) for indices in batches)
        with PhaseProgress(f"{describe} epoch {epoch}/{cfg.epochs}", len(batches), "steps", log) as progress:
            for _ in batches:
                step.run(state)
                scheduler.step()
                loss_sum += state.step_loss.float()
                progress.advance()
        train_loss = (loss_sum / len(batches)).item()  # waits for the epoch's last step
        trained = time.perf_counter()
        scores = {
            name: evaluate(classifier, split, name, score, cfg.eval_batch_size, device, precision, pad_id, network,
                           f"{describe} epoch {epoch}/{cfg.epochs}: ")
            for name, split in evaluations.items()
        }
        seconds = time.perf_counter() - started
        history.append({"epoch": epoch, "train_loss": train_loss, "scores": scores, "seconds": seconds,
                        "train_seconds": trained - started, "steps": len(batches)})
        log.info(
            "%s epoch %d/%d: train loss %.4f, %s (%.1f s)",
            describe, epoch, cfg.epochs, train_loss, metrics.format_scores(scores), seconds,
        )
    return history


def evaluate(
    classifier: torch.nn.Module,
    split: EncodedSplit,
    name: str,
    score: Callable[[np.ndarray, np.ndarray, list | None], dict[str, float]],
    batch_size: int,
    device: torch.device,
    precision: Precision,
    pad_id: int,
    network: CompiledClassifier | None = None,
    when: str = "",
) -> dict[str, float]:
    """The task's scores (`score`: of the outputs, the labels and the split's `scoring`) of the classifier on one
    evaluation split (dropout off); `when` begins its progress line."""
    outputs = predict(classifier, split, name, batch_size, device, precision, pad_id, network, when)
    return score(outputs.numpy(), split.labels.numpy(), split.scoring)


@torch.inference_mode()
def predict(
    classifier: torch.nn.Module,
    split: EncodedSplit,
    name: str,
    batch_size: int,
    device: torch.device,
    precision: Precision,
    pad_id: int,
    network: CompiledClassifier | None = None,
    when: str = "",
) -> torch.Tensor:
    """The classifier's outputs (N, num_labels), or (N, choices), in the split's order (dropout off); non-finite
    ones are an error naming the task and the file. With `network` (compiled), batches are full and static.
    `when` begins its progress line."""
    classifier.eval()
    order, outputs = [], []
    with PhaseProgress(f"{when}predicting {name}", len(split), "examples", log) as progress:
        for indices in evaluation_batches(split, batch_size):
            rows = indices if network is None else filled(indices, batch_size)
            batch = _to_device(collate(split, rows, pad_id, network and network.max_length), device)
            with precision.autocast():
                inputs = {key: value for key, value in batch.items() if key != "labels"}
                logits = (network or classifier)(**inputs).logits[: len(indices)]  # (B, num_labels), or (B, choices)
            order += indices
            outputs.append(logits.float())  # kept on the device: one copy to the host at the end, no wait a batch
            progress.advance(len(indices))
    every_output = torch.cat(outputs).cpu()
    in_split_order = torch.empty_like(every_output)
    in_split_order[torch.tensor(order)] = every_output
    if not torch.isfinite(in_split_order).all():
        raise CrammingError(f"{name}: the model's outputs on {split.source or 'its evaluation split'} are not finite "
                            "(the fine-tuning diverged); no score is reported")
    return in_split_order


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}

