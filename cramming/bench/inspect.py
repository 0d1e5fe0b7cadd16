"""What a benchmark run can say beyond its speed: how often torch.compile compiled, where a step's time goes
by operator (torch.profiler), and which kernel attention runs."""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cramming.engine.hardware import DTYPES

# the operator each of scaled_dot_product_attention's fused kernels runs as (the math fallback runs as matmuls)
SDPA_KERNELS = {"_scaled_dot_product_flash_attention": "flash",
                "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
                "_scaled_dot_product_efficient_attention": "efficient",
                "_scaled_dot_product_cudnn_attention": "cuDNN"}


def compile_counts() -> dict[str, int]:
    """Graphs torch.compile has compiled (a recompilation adds one) and graph breaks it has met so far in
    this process, for all models together."""
    # the counters torch.compile itself keeps (TORCH_LOGS reads them); dynamo loads only when they are asked for
    from torch._dynamo.utils import counters  # noqa: PLC0415

    return {"graphs_compiled": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values())}


def top_operators(step, device: torch.device, steps: int = 2, rows: int = 15) -> list[dict]:
    """The operators taking the most self time over `steps` profiled calls of `step`, with their share of
    the total: what is left to optimize, and whether it is matmuls (the limit) or everything around them."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 -- only with benchmark.profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
    on_device = device.type == "cuda"
    times = Counter()
    calls = Counter()
    for event in profiler.key_averages():
        times[event.key] += event.self_device_time_total if on_device else event.self_cpu_time_total
        calls[event.key] += event.count
    total = sum(times.values())
    return [{"operator": name, "self_ms": micros / 1e3 / steps, "share": micros / total, "calls": calls[name] // steps}
            for name, micros in times.most_common(rows)]


def operators_markdown(operators: list[dict], where: str) -> str:
    rows = [f"| operator | self time per step ({where}, ms) | share | calls per step |", "|---|---|---|---|"]
    rows += [f"| `{o['operator']}` | {o['self_ms']:.1f} | {100 * o['share']:.1f}% | {o['calls']} |" for o in operators]
    return "\n".join(rows)


class OperatorNames(TorchDispatchMode):
    """The names of the aten operators run inside it, in order (below autograd: what really ran)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def sdpa_kernel_used(batch: int, heads: int, seq_length: int, head_size: int, dtype: str,
                     device: torch.device) -> str:
    """The kernel F.scaled_dot_product_attention runs for attention of this shape, forward and backward, as
    the model calls it (no mask, no dropout): SDPA's own choice, seen in the operators it ran (math: none
    of its fused kernels), rather than the first kernel that can run in some order of our own."""
    q, k, v = (torch.randn(batch, heads, seq_length, head_size, device=device, dtype=DTYPES[dtype],
                           requires_grad=True) for _ in range(3))  # (B, nh, T, hs)
    with OperatorNames() as ran:
        torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    fused = [name for name in ran.names if name.startswith("_scaled_dot_product") and not name.endswith("_backward")]
    return SDPA_KERNELS.get(fused[0], fused[0]) if fused else "math"
