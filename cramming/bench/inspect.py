"""What a benchmark run can say beyond its speed: how often torch.compile compiled, and where a step's
time goes by operator (torch.profiler)."""

from collections import Counter

import torch


def compile_counts() -> dict[str, int]:
    """Graphs torch.compile has compiled (a recompilation adds one) and graph breaks it has met so far in
    this process, for all models together."""
    from torch._dynamo.utils import counters  # the counters torch.compile itself keeps (TORCH_LOGS reads them)

    return {"graphs_compiled": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}


def top_operators(step, device: torch.device, steps: int = 2, rows: int = 15) -> list[dict]:
    """The operators taking the most self time over `steps` profiled calls of `step`, with their share of
    the total: what is left to optimize, and whether it is matmuls (the limit) or everything around them."""
    from torch.profiler import ProfilerActivity, profile

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
