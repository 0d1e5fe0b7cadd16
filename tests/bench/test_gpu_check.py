"""scripts/gpu_check.py: on a machine without CUDA it refuses in one line; its stages are wired end to end
(benchmark, pretraining, GLUE on that checkpoint) as a CPU dry run with a tiny model, in one process
(stage=all) and each in its own time-limited process (stage=quick); a failed stage is reported, the next one
runs, and the command fails at the end."""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from cramming import compose_config as compose_command
from cramming.bench import gpu_check
from cramming.bench.gpu_check import STAGES, GpuCheckConfig, run_gpu_check, run_stage
from cramming.bench.gpu_report import markdown
from cramming.bench.gpu_suite import read_outcomes
from cramming.bench.inspect import sdpa_kernel_used
from cramming.errors import CrammingError
from cramming.train.signals import Interrupted
from cramming.pretraining import pretrain
from tests.commands import in_process
from tests.conftest import REPO_ROOT, SHARED_DATA
from tests.gpu.conftest import assert_a_budget_run
from tests.train.runs import TINY_RUN, compose_config, summary


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), f"output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here)")


@pytest.mark.slow
def test_every_stage_runs_through_the_command_line_as_a_cpu_dry_run(tmp_path):
    """`python scripts/gpu_check.py stage=all device=cpu` as a user types it: the GPU suite (skipped here),
    the benchmark, pretraining and GLUE on its checkpoint, composed inside gpu_check's own Hydra app
    (this raised `GlobalHydra is already initialized` before), and one report of all four."""
    glue = SHARED_DATA / "glue"
    arguments = ["stage=all", "device=cpu", f"output_dir={tmp_path}", "cram_minutes=0.06",
                 *([f"glue_dir={glue}"] if glue.is_dir() else [])]
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), *arguments],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stdout + run.stderr
    results = {stage: json.loads((tmp_path / f"{stage}.json").read_text()) for stage in STAGES}
    assert all(result["device"] == "cpu (dry run)" for result in results.values())
    tests = results["tests"]
    assert "error" not in tests and tests["tests"] > 0 and tests["skipped"] == tests["tests"] and not tests["failed"]
    assert results["bench"]["eager"]["ratio"] > 0 and "compiled" not in results["bench"]  # compiling is for GPUs
    assert results["bench"]["sdpa_kernel"] == "flash (CPU)"  # what SDPA ran at the tiny model's shape
    cram = results["cram"]["summary"]
    assert cram["stop_reason"] == "budget" and cram["validation"]["final_loss"] > 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("## GPU check (") and "torchao" in report
    assert [line.split(" on ")[0] for line in report.splitlines() if line.startswith("### ")] == [
        f"### gpu_check stage={stage}" for stage in STAGES]
    assert f"0 passed, 0 failed, {tests['tests']} skipped" in report and "| eager |" in report
    assert "SDPA kernel at the model's attention shape: flash (CPU)." in report
    assert [line.split(" ended after")[0] for line in run.stdout.splitlines() if " ended after " in line] == [
        f"gpu_check: stage {stage}" for stage in STAGES]  # each stage's time, printed as it ends
    if glue.is_dir():
        assert set(results["glue"]["seconds_per_task"]) == {"rte", "mrpc", "stsb"}
        assert "| rte | accuracy " in report


@pytest.mark.slow
def test_the_quick_check_runs_each_part_in_its_own_process_and_stops_one_at_its_limit(tmp_path):
    """stage=quick as a user types it, with the bench part given 1 s: it is stopped and reported, the parts
    after it still run, every part's result is in output_dir as it ends, and the command fails at the end."""
    glue = SHARED_DATA / "glue"
    arguments = ["stage=quick", "device=cpu", f"output_dir={tmp_path}", "cram_minutes=0.06", "quick_limits.bench=1",
                 *([f"glue_dir={glue}"] if glue.is_dir() else [])]
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), *arguments],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: gpu_check: 1 stage(s) failed: bench (stopped at its 1 s limit (quick_limits.bench))")
    results = {stage: json.loads((tmp_path / f"{stage}.json").read_text()) for stage in STAGES}
    tests = results["tests"]
    assert tests["selection"] == "quick" and 0 < tests["tests"] == tests["skipped"] < 10  # the quick selection
    assert "error" not in results["cram"] and results["cram"]["summary"]["stop_reason"] == "budget"
    assert results["bench"]["stage_seconds"] < 10  # stopped, not waited for
    ended = [line.split(" ended after ")[0] for line in run.stdout.splitlines() if "quick part" in line
             and " ended after " in line]
    assert ended == [f"gpu_check: quick part {stage}" for stage in STAGES]
    report = (tmp_path / "report.md").read_text()
    assert "- **failed**: stopped at its 1 s limit (quick_limits.bench)" in report
    assert all((tmp_path / f"{stage}.log").is_file() for stage in STAGES)  # each part's own output
    if glue.is_dir():
        assert list(results["glue"]["seconds_per_task"]) == ["rte"]


def test_a_missing_pytest_timeout_fails_the_tests_stage_and_the_command(tmp_path, monkeypatch):
    """pyproject's addopts pass --timeout: without pytest-timeout the suite cannot start. The tests stage and
    the command fail (exit 2) rather than report the stage as "not run" and exit 0."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pytest_timeout" else find_spec(name, *a))
    run = in_process("gpu_check", "stage=tests", "device=cpu", f"output_dir={tmp_path}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: gpu_check: 1 stage(s) failed: tests (pytest-timeout not installed, which the GPU suite needs")
    assert "pip install pytest-timeout" in (tmp_path / "report.md").read_text()


def test_each_finished_test_is_logged_as_it_ends(tmp_path):
    """The outcomes plugin writes a line per test as it ends: a suite killed part way leaves what it found."""
    (tmp_path / "test_three.py").write_text(
        "import os, signal\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert False\n"
        "def test_is_killed(): os.kill(os.getpid(), signal.SIGKILL)\n"
        "def test_never_runs(): pass\n")
    outcomes = tmp_path / "outcomes.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                          "cramming.bench.pytest_outcomes", f"--outcomes={outcomes}", "test_three.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == -9
    result = read_outcomes(outcomes)
    assert (result["tests"], result["passed"], result["failed"]) == (2, 1, ["test_three.py::test_fails"])


def test_a_failed_stage_is_recorded_and_the_check_fails_after_the_others(tmp_path, monkeypatch):
    """A stage that raises is recorded with its error in its JSON, its section and the report; a failed GPU
    test fails its stage; the command's one line names every failed stage."""
    cfg = GpuCheckConfig(stage="glue", device="cpu", output_dir=str(tmp_path))
    glue = run_stage("glue", cfg, tmp_path)  # no cram stage before it: nothing to score
    assert glue["error"].startswith("stage=glue scores the cram stage's checkpoint")
    monkeypatch.setattr(gpu_check, "_bench", lambda cfg, out: 1 / 0)
    assert run_stage("bench", cfg, tmp_path)["error"] == "ZeroDivisionError: division by zero"

    def stopped(cfg, out):  # Ctrl-C or SIGTERM (stage=quick's limit) in a cram: recorded, then the check stops
        raise Interrupted("stopped at step 3; checkpoint c", signal.SIGTERM)

    monkeypatch.setattr(gpu_check, "_cram", stopped)
    with pytest.raises(Interrupted):
        run_stage("cram", cfg, tmp_path)
    assert json.loads((tmp_path / "cram.json").read_text())["error"] == "stopped at step 3; checkpoint c"
    (tmp_path / "outcomes.jsonl").write_text("".join(json.dumps(line) + "\n" for line in [
        {"test": "tests/gpu/test_x.py::test_a", "when": "call", "outcome": "passed", "seconds": 1.0},
        {"test": "tests/gpu/test_x.py::test_b", "when": "call", "outcome": "failed", "seconds": 0.5},
        {"test": "tests/gpu/test_x.py::test_a", "when": "teardown", "outcome": "failed", "seconds": 0.1}]))
    monkeypatch.setattr("cramming.bench.gpu_check.run_gpu_suite",
                        lambda outcomes, selection: {"exit_code": 1, **read_outcomes(tmp_path / "outcomes.jsonl")})
    with pytest.raises(CrammingError, match=r"gpu_check: 1 stage\(s\) failed: tests \(2 GPU test\(s\) failed "
                                            r"\(tests/gpu/test_x.py::test_a, tests/gpu/test_x.py::test_b\)\)"):
        run_gpu_check(GpuCheckConfig(stage="tests", device="cpu", output_dir=str(tmp_path)))
    report = (tmp_path / "report.md").read_text()
    assert "0 passed, 2 failed, 0 skipped" in report
    assert report.count("- **failed**: ") == 4  # tests, bench, cram, glue


@pytest.mark.parametrize("setting, message", [
    ("tests=some", "error: tests='some' must be one of all, quick"),
    ("bench_modes=[fast]", "error: bench_modes=['fast'] must name some of compiled, eager"),
    ("quick_limits.cram=0", "error: quick_limits.cram=0.0 must be positive (seconds)"),
])
def test_bad_settings_are_one_line(tmp_path, setting, message):
    run = in_process("gpu_check", "device=cpu", setting, f"output_dir={tmp_path}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == message


def test_the_cram_stages_shards_may_be_a_glob_with_brackets(tmp_path):
    """data_files='shards/train-00[01].txt.gz' (two shards, as a short GPU slot carries) reaches the
    pretraining config as it was given: unquoted, Hydra's grammar read the brackets and refused it."""
    from cramming.pretraining import PretrainConfig  # noqa: F401  (registers the schemas pretrain.yaml names)

    cfg = GpuCheckConfig(stage="cram", device="cpu", data_files="shards/train-00[01].txt.gz")
    composed = compose_command("pretrain", gpu_check.cram_overrides(cfg, tmp_path / "a,b"))
    assert composed.data.files == "shards/train-00[01].txt.gz" and composed.output_dir == str(tmp_path / "a,b")


def test_the_sdpa_kernel_reported_is_the_one_sdpa_ran():
    """SDPA's own choice in the operators it ran: forcing its math fallback shows as math. The check tried
    kernels in an order of its own and named the first that ran (flash), whatever SDPA chose."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cpu = torch.device("cpu")
    assert sdpa_kernel_used(2, 4, 128, 32, "bf16", cpu) == "flash (CPU)"
    with sdpa_kernel(SDPBackend.MATH):
        assert sdpa_kernel_used(2, 4, 128, 32, "bf16", cpu) == "math"


def test_the_bench_stage_on_a_gpu_reports_each_modes_own_peak_memory(tmp_path, monkeypatch):
    """The bench stage's CUDA branch, with the benchmark stood in for (it needs the GPU): each mode's peak
    memory is each model's own from that mode's steps. It read the process's peak once after both modes,
    compiled and eager, ours and BERT's, all at once."""
    received = []

    def benchmark(cfg):
        s = cfg.benchmark
        received.append((cfg.arch.name, s.dtype, s.batch_size, s.compile, s.device))
        peak = 9.0 if s.compile else 12.0  # what each mode's own steps allocated
        written = tmp_path / f"compiled-{s.compile}.json"
        written.write_text(json.dumps({
            "arch": {"num_heads": 12, "hidden_size": 768}, "ratio": 1.5,
            "settings": {"batch_size": s.batch_size, "seq_length": s.seq_length, "dtype": s.dtype},
            "ours": {"tokens_per_s": 5e5, "mfu": 0.3, "peak_memory_gib": peak},
            "hf_bert": {"tokens_per_s": 3e5, "mfu": 0.25, "peak_memory_gib": peak + 2}}))
        return written

    kernels = []
    monkeypatch.setattr("cramming.bench.gpu_check.run_benchmark", benchmark)
    monkeypatch.setattr("cramming.bench.gpu_check.sdpa_kernel_used", lambda *shape: kernels.append(shape) or "flash")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: pytest.fail("the process's peak"))
    result = gpu_check._bench(GpuCheckConfig(device="cuda", output_dir=str(tmp_path)), tmp_path)
    assert received == [("crammed-bert", "bf16", 128, True, "cuda"), ("crammed-bert", "bf16", 128, False, "cuda")]
    assert kernels == [(128, 12, 128, 64, "bf16", torch.device("cuda"))]  # (B, nh, T, hs) of the model timed
    section = markdown("bench", {**result, "device": "a GPU", "stage_seconds": 1.0})
    assert "| compiled | 500,000 | 30.0% | 9.00 | 300,000 | 25.0% | 11.00 | 1.50x |" in section
    assert "| eager | 500,000 | 30.0% | 12.00 | 300,000 | 25.0% | 14.00 | 1.50x |" in section
    assert "SDPA kernel at the model's attention shape: flash." in section


def test_the_gpu_budget_test_holds_when_compilation_leaves_one_step(shared_cache, tmp_path, simulated_clock):
    """tests/gpu's budget run on cold caches: compilation took the budget, one step fit, and the test failed
    with `None > 0` on compile_s. Here a real run whose budget buys one microbatch."""
    run_dir = pretrain(compose_config(TINY_RUN + [f"budget={0.5 * simulated_clock / 3600}", "impl.microbatch_size=4",
                                                  "train.batch_size=4", f"output_dir={tmp_path}"]))
    result = summary(run_dir)
    assert result["steps"] == 1 and result["compile_s"] is None
    assert_a_budget_run(result)


def test_each_check_without_output_dir_gets_its_own_folder_and_glue_alone_finds_the_last_cram(tmp_path):
    """Two checks wrote to one outputs/gpu_check/, the second over the first; output_dir= stays as given."""
    earlier_cram = tmp_path / "outputs" / "gpu_check" / "2026-01-01_00-00-00" / "cram"
    earlier_cram.mkdir(parents=True)  # an earlier check's cram stage, without a checkpoint
    runs = [in_process("gpu_check", "stage=glue", "device=cpu", cwd=tmp_path) for _ in range(2)]
    for run in runs:  # the glue stage alone scores the newest earlier cram: here it has no checkpoint
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert f"stage(s) failed: glue (output_dir={earlier_cram.relative_to(tmp_path)}: not a" in run.stderr
    folders = [path for path in (tmp_path / "outputs" / "gpu_check").iterdir() if path != earlier_cram.parent]
    assert len(folders) == 2 and all((folder / "glue.json").is_file() for folder in folders)
    given = tmp_path / "given"
    assert in_process("gpu_check", "stage=glue", "device=cpu", f"output_dir={given}").returncode == 2
    assert (given / "glue.json").is_file() and f"{given / 'cram'} does not exist" in json.loads(
        (given / "glue.json").read_text())["error"]
