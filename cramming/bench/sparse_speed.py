"""The feed-forward matmuls of a crammed-bert layer, dense against 2:4 semi-structured sparse:
what `train.sparsity.method=semi-structured-2:4`'s pattern buys on sparse tensor cores.

    python scripts/bench_sparse.py [--tokens 8192] [--hidden 768] [--intermediate 3072] [--repeats 50]

Both FFN matrices of the layer (in: (intermediate, hidden); out: (hidden, intermediate / 2), which takes the GLU
product) are pruned to 2 of every 4 by magnitude, and x @ W^T runs once with the masked matrix dense
and once compressed by torch.sparse.to_sparse_semi_structured, in bf16, forward only, timed with CUDA
events: the median milliseconds of `--repeats` and their ratio. Training itself keeps dense kernels
(docs/ablations.md); this is the speed-up the pattern offers a sparse kernel. It needs an NVIDIA GPU of
compute capability 8.0 or later; elsewhere it says so in one line.
"""

import argparse
import statistics

import torch
from torch.sparse import to_sparse_semi_structured

from cramming.errors import CrammingError, exit_on_user_error
from cramming.train.techniques.sparsity import two_of_four_mask


def median_ms(matmul, repeats: int) -> float:
    for _ in range(3):  # warm-up: kernel selection, compression caches
        matmul()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        matmul()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def compare(tokens: int, hidden: int, intermediate: int, repeats: int) -> list[dict]:

    device = torch.device("cuda")
    rows = []
    for name, (out_features, in_features) in {"ffn in": (intermediate, hidden),
                                              "ffn out": (hidden, intermediate // 2)}.items():
        weight = torch.randn(out_features, in_features, device=device, dtype=torch.bfloat16)
        weight = weight * two_of_four_mask(weight)
        sparse = to_sparse_semi_structured(weight)
        x = torch.randn(tokens, in_features, device=device, dtype=torch.bfloat16)
        dense_ms = median_ms(lambda: torch.nn.functional.linear(x, weight), repeats)
        sparse_ms = median_ms(lambda: torch.nn.functional.linear(x, sparse), repeats)
        same = torch.allclose(torch.nn.functional.linear(x, weight), torch.nn.functional.linear(x, sparse),
                              rtol=2e-2, atol=2e-1)
        rows.append({"matrix": name, "shape": (out_features, in_features), "dense_ms": dense_ms,
                     "sparse_ms": sparse_ms, "speedup": dense_ms / sparse_ms, "same_result": same})
    return rows


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192, help="rows of x: microbatch x sequence length")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0):
        where = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU here"
        raise CrammingError(f"scripts/bench_sparse.py times torch.sparse's 2:4 kernels, which need an NVIDIA GPU of "
                            f"compute capability 8.0 or later ({where})")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, x: ({args.tokens}, in), median of "
          f"{args.repeats}")
    print("| matrix | W shape | dense ms | 2:4 sparse ms | speed-up | same result |")
    print("|---|---|---|---|---|---|")
    for row in compare(args.tokens, args.hidden, args.intermediate, args.repeats):
        print(f"| {row['matrix']} | {row['shape']} | {row['dense_ms']:.3f} | {row['sparse_ms']:.3f} "
              f"| {row['speedup']:.2f}x | {row['same_result']} |")
