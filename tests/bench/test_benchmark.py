"""scripts/benchmark.py end to end at toy size on the CPU: JSON and markdown written; bad settings give one line."""

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cramming.bench.variants import variant_names
from tests.commands import in_process

REPO = Path(__file__).resolve().parents[2]


def run(*overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "scripts/benchmark.py", "arch=crammed-bert-tiny", *overrides]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_benchmark_writes_results(tmp_path):
    settings = ("vocab_size=512", "steps=2", "warmup_steps=1", "batch_size=2", "device=cpu", f"output_dir={tmp_path}",
                "profile=true", "variants=[activation-checkpointing,sam,ema]")
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
        expected = (report[model]["tokens_per_s"] * report[model]["flops_per_token"]
                    / (report["measured_peak_tflops"] * 1e12))
        assert report[model]["mfu_measured"] == expected and expected > 0  # the peak is measured at another moment
    assert len(report["ours"]["step_times_s"]) == 2
    assert "| ours (crammed-bert-tiny) |" in json_path.with_suffix(".md").read_text()
    assert "step 2/2" in result.stdout
    operators = report["top_operators_ours"]  # where our step's time goes
    assert 0 < len(operators) <= 15 and 0.5 < sum(o["share"] for o in operators) <= 1.0 + 1e-9
    assert any(o["operator"] in ("aten::mm", "aten::addmm") for o in operators)
    assert report["compile"] is None  # nothing compiled, nothing to count
    assert report["host_syncs_per_step_ours"] == 0  # counted on the eager step: no .item(), nonzero, masks
    for model in ("ours", "hf_bert"):  # FlopCounterMode's count of what the step ran, and its MFU
        executed = report[model]["executed_flops_per_token"]
        assert 0 < executed and report[model]["mfu_executed_measured"] == pytest.approx(
            report[model]["tokens_per_s"] * executed / (report["measured_peak_tflops"] * 1e12))
    assert "top operators" in json_path.with_suffix(".md").read_text()
    variant = report["variants"]["activation-checkpointing"]  # timed interleaved with the default step
    assert variant["model"] == "ours + activation-checkpointing" and len(variant["step_times_s"]) == 2
    assert variant["tokens_per_s_vs_default"] == variant["tokens_per_s"] / report["ours"]["tokens_per_s"]
    assert variant["peak_memory_vs_default"] is None  # measured on a GPU only
    assert "Variant activation-checkpointing: " in json_path.with_suffix(".md").read_text()
    # the techniques' own steps, as pretraining builds them: SAM's runs every pass twice, EMA's none more
    executed = {name: report["variants"][name]["executed_flops_per_token"] for name in ("sam", "ema")}
    assert executed["sam"] == pytest.approx(2 * report["ours"]["executed_flops_per_token"])
    assert executed["ema"] == pytest.approx(report["ours"]["executed_flops_per_token"])


@pytest.mark.slow
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


@pytest.mark.parametrize("overrides, message, real", [  # one as a real subprocess, the others through the same
    # main() in this process (tests/commands.py)
    (["benchmark.dtype=fp8"], "error: benchmark.dtype must be one of fp32, bf16, fp16, got 'fp8'", True),
    (["benchmark.compile_mode=max-autotune"], "error: benchmark.compile_mode=max-autotune needs benchmark.compile=true",
     False),
    (["benchmark.compile=true", "benchmark.compile_mode=fast"],
     "error: benchmark.compile_mode must be one of default, reduce-overhead, max-autotune, "
     "max-autotune-no-cudagraphs, got 'fast'", False),
])
def test_benchmark_rejects_bad_settings(overrides, message, real):
    result = run(*overrides) if real else in_process("benchmark", "arch=crammed-bert-tiny", *overrides, cwd=REPO)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == message


@pytest.mark.parametrize(("overrides", "layers"), [([], 4), (["benchmark.batch_size=2"], None),
                                                  (["arch=crammed-bert-tiny"], None), (["benchmark.layers=16"], 16)])
def test_on_the_cpu_with_no_size_given_it_runs_a_cpu_sized_model_and_says_so(monkeypatch, tmp_path, overrides, layers):
    """With its defaults on a CPU it ran the full 16-layer, 120M-parameter model, ten minutes, without a word."""
    import torch

    import cramming.cli.benchmark as command

    ran = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(command, "run_benchmark", ran.append)  # what it would run: the settings are the point
    result = in_process("benchmark", *overrides, f"benchmark.output_dir={tmp_path}")
    assert result.returncode == 0 and "Traceback" not in result.stderr
    [cfg] = ran
    assert cfg.benchmark.layers == layers
    said = ("on the CPU with no size given: benchmark.layers=4 instead of crammed-bert's 16, to end in minutes (set "
            "benchmark.layers= to choose)")
    assert (said in result.stdout + result.stderr) == (not overrides)


@pytest.mark.parametrize(("overrides", "needed", "shape", "gib"), [
    # a GPU's benchmark line on a 24 GB CPU machine (20 GiB of it free): unchecked, killed minutes later
    (["benchmark.dtype=bf16", "benchmark.compile=true", "benchmark.batch_size=256"], "24.5", "256 x 128 tokens "
     "(16 layers, hidden 768, vocabulary 32768)", 20),
    (["arch=crammed-bert-tiny", "benchmark.device=cpu", "benchmark.batch_size=100000"], "3289.8",
     "100000 x 128 tokens (2 layers, hidden 128, vocabulary 32768)", 2048),
])
def test_a_step_too_large_for_the_cpus_memory_is_refused_before_it_runs(tmp_path, monkeypatch, overrides, needed,
                                                                         shape, gib):
    import psutil
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what the CPU machine says, on any machine
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=gib * 2**30))
    result = in_process("benchmark", *overrides, f"benchmark.output_dir={tmp_path}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    batch = shape.split(" x ")[0]
    assert result.stderr.strip() == (
        f"error: benchmark.batch_size={batch}: on the CPU, transformers' BertForMaskedLM alone needs at least {needed} "
        f"GiB at {shape} and this machine has {gib:.1f} GiB available: lower benchmark.batch_size (or "
        "benchmark.layers), or run it on a GPU")
    assert not list(tmp_path.iterdir())


def test_a_variant_that_cannot_run_here_is_one_line():
    result = run("benchmark.device=cpu", "benchmark.variants=[fp8]")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: benchmark.variants: impl.fp8=true needs an NVIDIA GPU of compute capability 8.9 or later (Ada, "
        "Hopper); this run is on cpu")


@pytest.mark.parametrize("variants, capability, compiled, dtype, words", [
    (["adamw8bit"], None, False, "fp32", "benchmark.variants: adamw8bit needs a CUDA GPU; this benchmark runs on cpu"),
    (["offload"], None, False, "fp32", "benchmark.variants: offload needs a CUDA GPU"),
    (["lora"], None, False, "fp32", f"benchmark.variants: 'lora' is unknown; choose from {', '.join(variant_names())}"),
    (["fp8"], (8, 0), True, "bf16", "this one has 8.0"),  # an A100
    (["fp8"], (9, 0), False, "bf16", "remove benchmark.compile=false"),
    (["offload"], (9, 0), True, "fp16", "benchmark.variants: impl.offload_optimizer=true does not combine with fp16 "
                                        "loss scaling (the gradients are copied to the CPU before they are unscaled): "
                                        "use benchmark.dtype=bf16 or fp32"),
    (["fp8", "fp8"], (9, 0), True, "bf16", "names a variant twice"),
])
def test_variants_are_checked_before_anything_is_built(monkeypatch, variants, capability, compiled, dtype, words):
    import torch

    from cramming.bench.variants import check_variants
    from cramming.errors import CrammingError

    device = torch.device("cpu") if capability is None else torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    with pytest.raises(CrammingError, match=re.escape(words)):
        check_variants(variants, device, compiled, dtype)
    check_variants([], device, compiled, dtype)  # the default alone is always fine


@pytest.mark.parametrize("card, peak", [("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
                                        ("NVIDIA H100 80GB HBM3", 989.0)])
def test_mfu_is_against_the_exact_cards_peak(monkeypatch, card, peak):
    import torch

    from cramming.bench.benchmark import BenchmarkSettings, device_peak_tflops

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: asked.append(device) or card)
    device = torch.device("cuda", 0)
    assert device_peak_tflops(BenchmarkSettings(dtype="bf16"), device)[0] == peak
    assert asked == [device]  # the benchmark's own device
    assert device_peak_tflops(BenchmarkSettings(dtype="fp32"), device)[0] is None  # no fp32 tensor peak kept


def test_each_compile_mode_writes_its_own_files():
    """Two modes benchmarked into one folder keep both results (the first GPU comparison of the modes ran each
    into a folder of its own, since their names were the same)."""
    from cramming.bench.benchmark import BenchmarkSettings, run_name

    def name(**settings) -> str:
        return run_name(BenchmarkSettings(layers=16, batch_size=128, dtype="bf16", **settings), "crammed-bert", "cuda")

    names = [name(), name(compile=True), *(name(compile=True, compile_mode=mode) for mode in
                                           ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))]
    stem = "crammed-bert-L16-b128x128-mlm0.15-bf16"
    assert names[:3] == [f"{stem}-cuda", f"{stem}-compiled-cuda", f"{stem}-compiled-reduce-overhead-cuda"]
    assert len(set(names)) == len(names)
