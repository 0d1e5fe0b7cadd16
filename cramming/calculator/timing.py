"""Timed training steps (forward, backward, clipping, fused AdamW) of our MLM model on random batches.

The same step as the trainer's, without data loading: what the speed fit measures and `check` verifies.
"""

import time
from dataclasses import dataclass

import torch

from cramming.model import ModelConfig, build_mlm_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Timing:
    tokens_per_s: float
    steps: int
    seconds: float  # measured time, warm-up excluded


def random_mlm_batch(batch: int, seq_length: int, vocab_size: int, mlm_rate: float, device) -> dict:
    """Random tokens with exactly round(mlm_rate * T) masked positions per row, as the data pipeline makes."""
    k = round(mlm_rate * seq_length)
    input_ids = torch.randint(5, vocab_size, (batch, seq_length))  # (B, T), above the special tokens
    masked_positions = torch.rand(batch, seq_length).topk(k, dim=1).indices.sort(dim=1).values  # (B, k)
    targets = input_ids.gather(1, masked_positions)
    labels = torch.full_like(input_ids, -100).scatter(1, masked_positions, targets)
    input_ids = input_ids.scatter(1, masked_positions, 4)  # [MASK]
    batch = {"input_ids": input_ids, "labels": labels, "masked_positions": masked_positions}
    return {key: value.to(device) for key, value in batch.items()}


def time_training(arch: ModelConfig, batch: int, vocab_size: int, seq_length: int, mlm_rate: float, *,
                  device: str = "cpu", precision: str = "fp32", warmup_steps: int = 1, min_steps: int = 3,
                  min_seconds: float = 0.0) -> Timing:
    """Tokens/s over at least `min_steps` steps and `min_seconds` seconds, after `warmup_steps` more."""
    device = torch.device(device)
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # denormals slow fp32 CPU math several-fold
    model = build_mlm_model(arch, vocab_size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-12, fused=True)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast = torch.autocast(device.type, dtype=DTYPES[precision], enabled=precision != "fp32")
    inputs = random_mlm_batch(batch, seq_length, vocab_size, mlm_rate, device)

    def step():
        with autocast:
            loss = model(**inputs).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup_steps):
        step()
    sync()
    started, steps = time.perf_counter(), 0
    while steps < min_steps or time.perf_counter() - started < min_seconds:
        step()
        sync()
        steps += 1
    seconds = time.perf_counter() - started
    return Timing(tokens_per_s=steps * batch * seq_length / seconds, steps=steps, seconds=seconds)
