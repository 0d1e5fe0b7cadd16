"""Every command on a CUDA GPU, through its command line: pretraining under the budget clock with compile
and the automatic microbatch, resume, GLUE on the checkpoint, the benchmark, torchrun with one process,
and the device rule with the real `torch.cuda.set_device`."""

import json
import sys

import pytest
import torch

from cramming.engine.device import prepare_device, resolve_device
from tests.eval.conftest import make_checkpoint
from tests.gpu.conftest import (STEPS, TINY_GPU_RUN, assert_a_budget_run, losses, run_script, summary,
                                the_run)


@pytest.mark.quick
def test_an_index_less_cuda_device_is_resolved_with_its_index_and_prepared():
    device = resolve_device("cuda", "device")
    assert device.index == torch.cuda.current_device()
    prepare_device(device)
    prepare_device(torch.device("cuda"))  # the index-less form that crashed eval_glue.py on the first H100


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    """36 s on the budget clock, compile on (the GPU profile's default), automatic microbatch."""
    output_dir = tmp_path_factory.mktemp("budget")
    run = run_script("pretrain.py", *TINY_GPU_RUN, "budget=0.01", f"output_dir={output_dir}",
                     f"cache_dir={output_dir / 'cache'}", "logging.progress=lines")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return the_run(output_dir), run.stdout + run.stderr


def test_pretraining_under_the_budget_clock_with_compile_and_the_automatic_microbatch(budget_run):
    run_dir, output = budget_run
    result = summary(run_dir)
    assert_a_budget_run(result)
    assert result["provenance"]["device"]["type"] == "cuda"
    assert result["microbatch_source"] != "cpu profile" and result["microbatch_size"] >= 32
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()
    assert "Traceback" not in output


def test_a_run_resumed_from_a_middle_checkpoint_continues_it(tmp_path):
    """Resume on the GPU: the records up to the checkpoint come along and training goes on from there to the
    same losses (up to the GPU's non-deterministic reductions: impl.deterministic=false, the default)."""
    every_step = [*TINY_GPU_RUN, *STEPS, "impl.compile=false", "checkpoint.interval_minutes=1e-9",
                  "checkpoint.keep_last=8", f"cache_dir={tmp_path / 'cache'}"]
    first = run_script("pretrain.py", *every_step, f"output_dir={tmp_path / 'first'}")
    assert first.returncode == 0, first.stderr[-3000:]
    straight = the_run(tmp_path / "first")
    middle = straight / "checkpoints" / "step-00000003"
    resumed = run_script("pretrain.py", *every_step, f"output_dir={tmp_path / 'resumed'}", f"resume={middle}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = the_run(tmp_path / "resumed")
    assert len(losses(again)) == len(losses(straight)) == 6
    torch.testing.assert_close(losses(again), losses(straight), rtol=1e-3, atol=1e-3)


@pytest.mark.quick
def test_eval_glue_scores_a_checkpoint_on_the_gpu(tmp_path):
    """The command on a tiny checkpoint made here (the budget run's would cost the quick selection its 36 s)."""
    header = "index\tsentence1\tsentence2\tlabel\n"
    rows = [f"{i}\tThe cat number {i} sat on the mat.\tA cat sat.\t{('entailment', 'not_entailment')[i % 2]}\n"
            for i in range(48)]
    checkpoint = make_checkpoint(tmp_path / "ckpt", [row.split("\t")[1] for row in rows], vocab_size=100)
    rte = tmp_path / "glue" / "RTE"
    rte.mkdir(parents=True)
    (rte / "train.tsv").write_text(header + "".join(rows[:32]))
    (rte / "dev.tsv").write_text(header + "".join(rows[32:]))
    run = run_script("eval_glue.py", f"ckpt={checkpoint}", "eval.tasks=[rte]", f"eval.data_dir={tmp_path / 'glue'}",
                     "eval.epochs=1", f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 0, run.stderr[-3000:]
    (results_file,) = (tmp_path / "out").rglob("glue_results.json")
    results = json.loads(results_file.read_text())
    assert results["provenance"]["device"]["type"] == "cuda"
    assert results["runtime"]["compiled"] is True  # eval.compile's default on a GPU
    assert 0 <= results["scores"]["rte"]["accuracy"] <= 100


def test_the_benchmark_times_every_gpu_option_against_the_default(tmp_path):
    variants = ["fp8", "adamw8bit", "offload", "activation-checkpointing"]
    run = run_script("scripts/benchmark.py", "arch=crammed-bert-tiny", "benchmark.dtype=bf16", "benchmark.compile=true",
                     "benchmark.batch_size=32", "benchmark.steps=2", "benchmark.warmup_steps=2",
                     f"benchmark.variants=[{','.join(variants)}]", f"benchmark.output_dir={tmp_path}")
    assert run.returncode == 0, run.stderr[-3000:]
    (result_file,) = tmp_path.glob("*.json")
    result = json.loads(result_file.read_text())
    assert result["settings"]["device"] == "cuda" and result["ours"]["peak_memory_gib"] > 0
    assert result["ours"]["tokens_per_s"] > 0 and result["compile"]["recompiles_after_warmup"] == 0
    assert result["host_syncs_per_step_ours"] == 0
    assert list(result["variants"]) == variants
    for figures in result["variants"].values():
        assert figures["tokens_per_s_vs_default"] > 0 and figures["peak_memory_vs_default"] > 0


@pytest.mark.quick
def test_torchrun_with_one_process(tmp_path):
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1")
    run = run_script("pretrain.py", *TINY_GPU_RUN, *STEPS, "impl.compile=false", f"output_dir={tmp_path}",
                     f"cache_dir={tmp_path / 'cache'}", launcher=torchrun)
    assert run.returncode == 0, run.stderr[-3000:]
    assert summary(the_run(tmp_path))["steps"] == 6
