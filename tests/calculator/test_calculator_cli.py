"""scripts/calculator.py end to end: table, JSON, markdown and plot; fit and check at toy size; bad input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from cramming.calculator.config import CalculatorConfig, CandidateGrid, FitGrid, check_config
from cramming.calculator.measure import local_device
from cramming.calculator.report import why_recommended
from cramming.calculator.speed_model import SpeedConstants, SpeedModel, save_measurement
from cramming.errors import CrammingError
from cramming.engine.hardware import known_profiles
from cramming.model import ModelConfig
from cramming.model.config import as_model_config
from tests.commands import in_process
from tests.train.conftest import straight_run  # noqa: F401  (the test session's finished 8-step run)

from .test_loss_model import write_run

REPO = Path(__file__).resolve().parents[2]
TOY = ("vocab_size=512", "candidates.depths=[1,2]", "candidates.widths=[64,128]", "fit_grid.depths=[1,2]",
       "fit_grid.widths=[64,128]", "fit_grid.batches=[2,4]", "fit_grid.steps=1")


def run(tmp_path, *overrides):
    command = [sys.executable, "scripts/calculator.py", f"output_dir={tmp_path / 'out'}", *overrides]
    # PYTHONPATH: this checkout's package (`python scripts/x.py` puts scripts/ first on sys.path; an editable
    # install may point at another checkout), as tests/conftest.py sets it for every other subprocess
    env = {"CRAMMING_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


def test_ranks_shapes_with_a_loss_fit_and_writes_outputs(tmp_path):
    for i, (layers, hidden) in enumerate([(1, 64), (2, 64), (2, 128), (4, 128)]):
        arch = ModelConfig(name="tiny", num_layers=layers, hidden_size=hidden, num_heads=4,
                           intermediate_size=4 * hidden)
        write_run(tmp_path / "runs" / f"r{i}" / "2026-01-01_00-00-00", arch, [8.0, 6.0 - 0.2 * i])
    result = run(tmp_path, "budget=24", "gpu=2080ti", f"runs={tmp_path}/runs/*/*/metrics.jsonl")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "2080ti-24h.json").read_text())
    assert report["budget_hours"] == 24 and report["microbatch_size"] == 128
    assert "V100" in report["speed"]["source"] and "V100" in result.stdout  # says it is not measured
    assert len(report["held_out"]) == 4 and "largest held-out error" in result.stdout
    candidates = report["candidates"]
    assert len(candidates) == 9 * 8 and candidates[0]["recommended"]
    assert sum(c["recommended"] for c in candidates) == 1
    assert [c["loss"] for c in candidates] == sorted(c["loss"] for c in candidates)
    assert "**recommended**" in (tmp_path / "out" / "2080ti-24h.md").read_text()
    assert (tmp_path / "out" / "2080ti-24h.png").stat().st_size > 10_000
    said_what_trains_it(result, report, tmp_path / "out" / "2080ti-24h.md")


def said_what_trains_it(result, report: dict, markdown: Path) -> None:
    """The recommended shape as the overrides that train it (the last line, and in the markdown), and what it is
    against the compute-optimal size of its FLOPs: the table's column and the recommendation agree on it."""
    best = report["candidates"][0]
    command = (f"python pretrain.py budget={report['budget_hours']:g} gpu={report['gpu']} "
               f"arch.num_layers={best['layers']} arch.hidden_size={best['hidden']} arch.num_heads={best['heads']} "
               f"arch.intermediate_size={best['ffn']}")
    assert result.stdout.strip().splitlines()[-1] == f"next: {command}"
    assert f"Train it: `{command}`" in markdown.read_text()
    ratio = best["parameters"] / best["optimal_parameters"]
    assert (f"Recommended: {best['layers']} x {best['hidden']} (" in result.stdout
            and f"{ratio:.2g}x the compute-optimal size for the {best['flops']:.3g} FLOPs" in result.stdout)


def test_without_runs_the_recommendation_is_the_lowest_loss_index_and_says_why_it_is_not_the_optimal_size(tmp_path):
    """A 2080 Ti day recommended 10 x 1024 beside a column saying 43.4M, and printed no command to train it."""
    result = in_process("calculator", "budget=24", "gpu=2080ti", f"output_dir={tmp_path / 'out'}",
                        f"cache_dir={tmp_path / 'cache'}", cwd=REPO)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "2080ti-24h.json").read_text())
    best = report["candidates"][0]
    assert best["recommended"] and best["parameters"] > 1.25 * best["optimal_parameters"]  # (the V100 constants)
    said_what_trains_it(result, report, tmp_path / "out" / "2080ti-24h.md")
    assert "the best shape near its own compute-optimal size" in result.stdout  # and why that one ranks lower


@pytest.mark.slow
def test_fit_then_check_on_this_machine(tmp_path):
    result = run(tmp_path, "budget=0.01", "gpu=cpu", "fit=true", "check=true", "check_seconds=1", *TOY)
    assert result.returncode == 0, result.stderr
    stored = json.loads((tmp_path / "cache" / "calculator" / "cpu.json").read_text())
    assert len(stored["points"]) == 8 and stored["fit_error"] >= 0
    assert "RMS error" in result.stdout and "check: predicted" in result.stdout
    report = json.loads((tmp_path / "out" / "cpu-0.01h.json").read_text())
    assert report["frontier"] is None and all(c["loss"] is None for c in report["candidates"])
    assert report["check"]["measured_tokens_per_s"] > 0 and report["check"]["predicted_tokens_per_s"] > 0
    assert report["speed"]["source"].startswith("measured on CPU")
    again = run(tmp_path, "budget=0.01", "gpu=cpu", *TOY)  # the stored constants are reused
    assert again.returncode == 0, again.stderr
    reused = json.loads((tmp_path / "out" / "cpu-0.01h.json").read_text())
    assert reused["speed"]["constants"] == stored["constants"]


def test_runs_on_other_data_or_tokenizers_are_not_fitted_together(tmp_path):
    """runs='outputs/*/*/metrics.jsonl' fitted one law across unrelated corpora and vocabularies, without a word."""
    arch = ModelConfig(name="tiny", num_layers=2, hidden_size=64, num_heads=4, intermediate_size=256)
    for i, vocab_size in enumerate([4096, 4096, 32768]):
        write_run(tmp_path / "runs" / f"r{i}" / "2026-01-01_00-00-00", arch, [8.0, 6.0 - 0.2 * i],
                  vocab_size=vocab_size)
    result = in_process("calculator", "budget=24", "gpu=2080ti", f"runs={tmp_path}/runs/*/*/metrics.jsonl",
                        f"output_dir={tmp_path / 'out'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"error: runs= mixes runs on different data or tokenizers (data.tokenizer.vocab_size=4096 in "
        f"{tmp_path}/runs/r0/2026-01-01_00-00-00, 32768 in {tmp_path}/runs/r2/2026-01-01_00-00-00): a loss fit "
        "needs runs on the same data and tokenizer; choose them with runs=")
    assert not (tmp_path / "out").exists()


def test_bad_input_is_one_line(tmp_path):
    result = run(tmp_path, "budget=-1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "error: budget=-1.0 must be positive (GPU-hours)"
    result = run(tmp_path, "gpu=nonexistent")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown gpu=nonexistent; choose one of 2080ti, 3060ti, a100,")


@pytest.mark.parametrize("settings,message", [
    ({"check_seconds": 0}, "check_seconds=0 must be positive"),
    ({"fit_grid": FitGrid(widths=[])}, "fit_grid.widths=[] must be a non-empty list"),
    ({"candidates": CandidateGrid(widths=[100])}, "width 100 must be even and a multiple of head_size=64"),
    ({"loss_exponent": 1.5}, "loss_exponent=1.5 must be in (0, 1)"),
])
def test_bad_settings_are_rejected(settings, message):
    with pytest.raises(CrammingError, match=re.escape(message)):
        check_config(CalculatorConfig(gpu=known_profiles()["2080ti"], **settings))


def test_fit_and_check_need_the_profile_of_this_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the machine without a GPU, on any machine
    with pytest.raises(CrammingError, match="needs a CUDA GPU"):
        local_device(known_profiles()["a100"])
    assert local_device(known_profiles()["cpu"]) == "cpu"


def test_schema_rejects_unknown_keys_and_reads_the_gpu_group():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    import cramming.calculator.config  # noqa: F401  (registers the schema)

    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("calculator", overrides=["budget=12", "gpu=a6000", "runs='outputs/*/*/metrics.jsonl'"])
        assert (cfg.budget, cfg.gpu.name, cfg.gpu.peak_tflops) == (12.0, "a6000", 154.8)
        assert cfg.runs == "outputs/*/*/metrics.jsonl"
        with pytest.raises(ConfigCompositionException):
            compose("calculator", overrides=["budgt=12"])


@pytest.fixture
def one_h100_pcie(monkeypatch):
    """torch.cuda as on a machine with one H100 PCIe; returns the devices get_device_name was asked about."""
    asked = []
    for name, value in {"is_available": lambda: True, "is_bf16_supported": lambda *a, **k: True,
                        "get_device_name": lambda device=None: asked.append(device) or "NVIDIA H100 PCIe"}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    return asked


def test_fit_refuses_a_profile_that_is_not_this_card(one_h100_pcie, tmp_path):
    """fit=true with the default gpu=2080ti on an H100 stored the H100's timings as the 2080 Ti's."""
    profiles = known_profiles()
    for other in ("2080ti", "h100"):
        with pytest.raises(CrammingError, match=re.escape(
                f"fit and check time this machine's NVIDIA H100 PCIe, which is gpu=h100-pcie, not gpu={other}: "
                "add gpu=auto")):
            local_device(profiles[other])
    assert local_device(profiles["h100-pcie"]) == "cuda" and one_h100_pcie == [None, None, None]
    run = in_process("calculator", "fit=true", f"cache_dir={tmp_path}", f"output_dir={tmp_path}", cwd=REPO)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == ("error: fit and check time this machine's NVIDIA H100 PCIe, "
                                                   "which is gpu=h100-pcie, not gpu=2080ti: add gpu=auto")
    assert not (tmp_path / "calculator").exists()  # nothing timed, nothing stored


def test_a_gpus_fit_grid_holds_the_recipes_shape_compiled():
    """On a GPU the default grid holds crammed-bert's 16 x 768 at microbatch 128, compiled as training is;
    the CPU's stays small and eager; a grid the user gives is kept."""
    profiles = known_profiles()
    gpu = FitGrid().resolved(profiles["h100"])
    assert 16 in gpu.depths and 768 in gpu.widths and 128 in gpu.batches and gpu.compile
    assert len(gpu.depths) * len(gpu.widths) * len(gpu.batches) == 12
    cpu = FitGrid().resolved(profiles["cpu"])
    assert (cpu.depths, cpu.widths, cpu.batches, cpu.compile) == ([1, 2, 4], [64, 128, 256], [8, 32], False)
    mine = FitGrid(widths=[64], compile=False).resolved(profiles["h100"])
    assert (mine.depths, mine.widths, mine.compile) == ([4, 16], [64], False)


def test_check_run_sets_the_prediction_against_a_real_runs_tokens_per_second(straight_run, tmp_path):
    """The speed model's tokens/s at a finished run's shape and microbatch against the run's steady tokens/s:
    on a GPU, the fit's error against the real loop."""
    constants = SpeedConstants(k=3.0e6, a=1.4, b=2.5, c=0.9)
    save_measurement(str(tmp_path / "cache"), SpeedModel("cpu", constants, "measured on a test", 0.05), {})
    run = in_process("calculator", "budget=0.01", "gpu=cpu", f"check_run={straight_run}",
                     f"cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'out'}", cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    checked = json.loads((tmp_path / "out" / "cpu-0.01h.json").read_text())["check_run"]
    facts = json.loads((straight_run / "summary.json").read_text())
    config = OmegaConf.load(straight_run / "config.yaml")
    predicted = SpeedModel("cpu", constants, "").tokens_per_second(
        as_model_config(config.arch), facts["microbatch_size"], config.data.tokenizer.vocab_size,
        config.data.seq_length, config.train.mlm_rate)
    assert checked["measured_tokens_per_s"] == facts["steady_tokens_per_s"] > 0
    assert checked["predicted_tokens_per_s"] == pytest.approx(predicted)
    assert checked["relative_error"] == pytest.approx(predicted / facts["steady_tokens_per_s"] - 1)
    assert "check_run: 2 x 128, microbatch 16: predicted" in run.stdout


def test_check_run_refuses_a_run_of_another_device(straight_run, tmp_path):
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text((straight_run / "config.yaml").read_text())
    facts = json.loads((straight_run / "summary.json").read_text())
    facts["provenance"]["device"] = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}
    (elsewhere / "summary.json").write_text(json.dumps(facts))
    for run_dir, message in [(elsewhere, f"error: check_run={elsewhere} ran on NVIDIA H100 80GB HBM3 (gpu=h100), "
                                         "not gpu=cpu"),
                             (tmp_path, f"error: check_run={tmp_path} needs summary.json and config.yaml")]:
        run = in_process("calculator", "gpu=cpu", f"check_run={run_dir}", f"cache_dir={tmp_path}",
                         f"output_dir={tmp_path / 'out'}", cwd=REPO)
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.strip().splitlines()[-1].startswith(message)


@pytest.mark.parametrize("content", ['{"profile": "cpu", "constants": {"k": 2.', "not json", "[]",
                                     '{"constants": {"k": "fast", "a": 1, "b": 1, "c": 1}, "source": "x"}'],
                         ids=["truncated", "not-json", "a-list", "wrong-types"])
def test_a_damaged_fit_is_one_line_naming_it_and_how_to_measure_again(tmp_path, content):
    fit = tmp_path / "cache" / "calculator" / "cpu.json"
    fit.parent.mkdir(parents=True)
    fit.write_text(content)
    result = in_process("calculator", "gpu=cpu", "budget=1", f"cache_dir={tmp_path / 'cache'}",
                        f"output_dir={tmp_path / 'out'}", cwd=REPO)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {fit}") and "measure again with fit=true" in last, last
    assert not (tmp_path / "out").exists()


def test_a_recommendation_at_the_grids_edge_says_so_instead_of_comparing_it_with_itself():
    def shape(layers, hidden, parameters, optimal, recommended=False):
        return {"layers": layers, "hidden": hidden, "parameters": parameters, "optimal_parameters": optimal,
                "flops": 3e13, "loss": None, "loss_index": 2.0, "recommended": recommended}

    said = why_recommended([shape(2, 128, 328e3, 10.4e3, recommended=True), shape(4, 128, 656e3, 10.4e3)])
    assert said.endswith("No candidate is within 0.8x to 1.25x of its compute-optimal size: this is the closest, at "
                         "the grid's edge; a smaller shape than the grid holds (candidates.depths, candidates.widths) "
                         "may rank better.")
