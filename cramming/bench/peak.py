"""What this device's matmuls really reach at the model's shapes: the denominator of an honest MFU.

A datasheet peak is rarely reachable (and a CPU has none); the same GEMMs the training step runs, timed
on this device in the step's dtype and weighted as often as the step runs them, say how close to the
machine's own limit the step is.
"""

import time

import torch

from cramming.engine.hardware import DTYPES
from cramming.model import ModelConfig

Shape = tuple[int, int, int]  # (M, K, N): an (M, K) by (K, N) product


def model_gemm_shapes(arch: ModelConfig, batch_size: int, seq_length: int, vocab_size: int,
                      mlm_rate: float) -> list[tuple[Shape, int]]:
    """(shape, times per step) of the training step's GEMMs: each forward product of a layer (qkv, attention
    output, FFN in and out — GLU halves the output's input), num_layers times, and of the head (its
    transform's dense, where it has one, and the decoder, on the masked or on all tokens), once; each with
    the two products of its backward pass (input gradient, weight gradient)."""
    tokens, hidden = batch_size * seq_length, arch.hidden_size
    width = arch.intermediate_size // 2 if arch.ffn == "glu" else arch.intermediate_size
    predicted = batch_size * round(mlm_rate * seq_length) if arch.sparse_prediction else tokens
    layer = [(tokens, hidden, 3 * hidden), (tokens, hidden, hidden), (tokens, hidden, arch.intermediate_size),
             (tokens, width, hidden)]
    head = [(predicted, hidden, hidden)] * arch.head_transform + [(predicted, hidden, vocab_size)]
    forward = [(shape, arch.num_layers) for shape in layer] + [(shape, 1) for shape in head]
    return [(shape, count) for (m, k, n), count in forward for shape in ((m, k, n), (m, n, k), (k, m, n))]


def measured_peak_tflops(shapes: list[tuple[Shape, int]], dtype: str, device: torch.device,
                         repeats: int = 5) -> float:
    """TFLOP/s of these GEMMs, each timed into a preallocated output (a fresh large output would also time
    the allocator's page faults) and weighted by its count: the best of `repeats` passes after a warm-up.

    Weighted, so that a 16-layer step is judged by its layers' shapes rather than equally by the decoder's
    (slower: its inner dimension is the few masked tokens). The best, not the median: a peak is what the
    device reaches, and on a shared machine a slower pass is interference."""
    def tensor(rows: int, columns: int) -> torch.Tensor:
        return torch.randn(rows, columns, device=device, dtype=DTYPES[dtype])

    operands = [(tensor(m, k), tensor(k, n), tensor(m, n), count) for (m, k, n), count in shapes]
    flops = sum(2 * m * k * n * count for (m, k, n), count in shapes)
    rates = []
    for attempt in range(repeats + 1):
        seconds = 0.0
        for a, b, out, count in operands:
            _synchronize(device)
            started = time.perf_counter()
            torch.matmul(a, b, out=out)
            _synchronize(device)
            seconds += count * (time.perf_counter() - started)
        if attempt:  # the first pass warms up the kernels and caches
            rates.append(flops / seconds / 1e12)
    return max(rates)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
