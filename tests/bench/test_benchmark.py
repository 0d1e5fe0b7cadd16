"""scripts/benchmark.py end to end at toy size on the CPU: JSON and markdown written; bad settings give one line."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "scripts/benchmark.py", "arch=crammed-bert-tiny", *overrides]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_benchmark_writes_results(tmp_path):
    settings = ("vocab_size=512", "steps=2", "warmup_steps=1", "batch_size=2", "device=cpu", f"output_dir={tmp_path}",
                "profile=true")
    result = run(*(f"benchmark.{setting}" for setting in settings))
    assert result.returncode == 0, result.stderr
    [json_path] = tmp_path.glob("*.json")
    report = json.loads(json_path.read_text())
    assert report["ours"]["tokens_per_s"] > 0 and report["hf_bert"]["tokens_per_s"] > 0
    assert report["ratio"] == report["ours"]["tokens_per_s"] / report["hf_bert"]["tokens_per_s"]
    assert report["ours"]["mfu"] is None and report["peak"].startswith("unknown")  # CPU: peak unknown
    # ... but its matmuls' own peak is measured in the same run: the MFU that a CPU can be judged by
    assert report["measured_peak_tflops"] > 0
    for model in ("ours", "hf_bert"):
        expected = report[model]["tokens_per_s"] * report[model]["flops_per_token"] / (report["measured_peak_tflops"] * 1e12)
        assert report[model]["mfu_measured"] == expected and expected > 0  # the peak is measured at another moment
    assert len(report["ours"]["step_times_s"]) == 2
    assert "| ours (crammed-bert-tiny) |" in json_path.with_suffix(".md").read_text()
    assert "step 2/2" in result.stdout
    operators = report["top_operators_ours"]  # where our step's time goes
    assert 0 < len(operators) <= 15 and 0.5 < sum(o["share"] for o in operators) <= 1.0 + 1e-9
    assert any(o["operator"] in ("aten::mm", "aten::addmm") for o in operators)
    assert report["compile"] is None  # nothing compiled, nothing to count
    assert "top operators" in json_path.with_suffix(".md").read_text()


def test_compile_counts_see_a_recompilation():
    """The benchmark's recompilation count is torch.compile's own graph count: a new input shape (static
    shapes asked for) compiles a second graph, the same shape again does not."""
    import torch

    from cramming.bench.inspect import compile_counts

    double = torch.compile(lambda x: x * 2, dynamic=False)
    before = compile_counts()["graphs_compiled"]
    double(torch.ones(3))
    double(torch.ones(3))
    assert compile_counts()["graphs_compiled"] == before + 1
    double(torch.ones(4))
    assert compile_counts()["graphs_compiled"] == before + 2


def test_benchmark_rejects_bad_settings():
    result = run("benchmark.dtype=fp8")
    assert result.returncode == 2
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == "error: benchmark.dtype must be one of fp32, bf16, fp16, got 'fp8'"
