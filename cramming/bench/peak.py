"""What this device's matmuls really reach at the model's shapes: the denominator of an honest MFU.

A datasheet peak is rarely reachable (and a CPU has none); the same GEMMs the training step runs, timed
back to back on this device in the step's dtype, say how close to the machine's own limit the step is.
"""

import statistics
import time

import torch

from cramming.model import ModelConfig
from cramming.runtime import DTYPES


def model_gemm_shapes(arch: ModelConfig, batch_size: int, seq_length: int, vocab_size: int,
                      mlm_rate: float) -> list[tuple[int, int, int]]:
    """(M, K, N) of the training step's GEMMs for one layer and the decoder: each forward product
    (qkv, attention output, FFN in and out — GLU halves the output's input —, the decoder on the masked or
    on all tokens) and the two of its backward pass (input gradient, weight gradient)."""
    tokens, hidden = batch_size * seq_length, arch.hidden_size
    width = arch.intermediate_size // 2 if arch.ffn == "glu" else arch.intermediate_size
    predicted = batch_size * round(mlm_rate * seq_length) if arch.sparse_prediction else tokens
    forward = [(tokens, hidden, 3 * hidden), (tokens, hidden, hidden), (tokens, hidden, arch.intermediate_size),
               (tokens, width, hidden), (predicted, hidden, vocab_size)]
    return [shape for m, k, n in forward for shape in ((m, k, n), (m, n, k), (k, m, n))]


def measured_peak_tflops(shapes: list[tuple[int, int, int]], dtype: str, device: torch.device,
                         repeats: int = 5) -> float:
    """Median over `repeats` (after one warm-up) of the TFLOP/s of these GEMMs run back to back, into
    preallocated outputs (a fresh large output would also time the allocator's page faults)."""
    def tensor(rows: int, columns: int) -> torch.Tensor:
        return torch.randn(rows, columns, device=device, dtype=DTYPES[dtype])

    operands = [(tensor(m, k), tensor(k, n), tensor(m, n)) for m, k, n in shapes]
    flops = sum(2 * m * k * n for m, k, n in shapes)
    rates = []
    for attempt in range(repeats + 1):
        _synchronize(device)
        started = time.perf_counter()
        for a, b, out in operands:
            torch.matmul(a, b, out=out)
        _synchronize(device)
        if attempt:  # the first pass warms up the kernels and caches
            rates.append(flops / (time.perf_counter() - started) / 1e12)
    return statistics.median(rates)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
