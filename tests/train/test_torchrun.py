"""Several processes under torchrun with gloo: each rank's collectives time out after a few
seconds (tests/rank_shim.py), rank 0's data preparation and GLUE are made slower than that, and the run must
still complete under the default stop (the budget): no rank waits in a collective on work of unbounded length.
The same run counts the host syncs of every training-loop iteration: the stop decision, the validation schedule
and the mid-step budget check do not read a collective at every step (the ranks agree every few steps:
cramming.train.stopping)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from cramming.train.distributed import Distributed
from tests.conftest import REPO_ROOT, SHARED_DATA, SIMULATED_MICROBATCH_SECONDS
from tests.train.runs import NO_PROBE, SHORT_ROWS, summary

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
GROUP_TIMEOUT_S = 8
SLOWER_BY_S = GROUP_TIMEOUT_S + 4  # half again the timeout: a rank waiting in a collective would fail
BUDGET_HOURS = 0.006
GLUE_DIR = SHARED_DATA / "glue"


@pytest.fixture(scope="module")
def slow_rank0_run(tmp_path_factory, session_cache):
    if not GLUE_DIR.exists():
        pytest.skip(f"GLUE data not found at {GLUE_DIR}")
    root = tmp_path_factory.mktemp("ranks")
    conditions = {"CRAMMING_TEST_GROUP_TIMEOUT_S": str(GROUP_TIMEOUT_S),
                  "CRAMMING_TEST_SLOW_RANK0": f"prepare:{SLOWER_BY_S},glue:{SLOWER_BY_S}",
                  "CRAMMING_TEST_SYNCS": str(root / "syncs"), "CRAMMING_CACHE": str(session_cache),
                  "CRAMMING_SIMULATED_MICROBATCH_SECONDS": str(SIMULATED_MICROBATCH_SECONDS)}
    arguments = ["--config-name", "quickstart", NO_PROBE, SHORT_ROWS, f"budget={BUDGET_HOURS}", f"output_dir={root}",
                 "logging.every_fraction=1", "train.validation.fractions=[]",
                 "eval=glue", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}", "eval.max_train_examples=16",
                 "eval.epochs=1"]
    run = subprocess.run([*TORCHRUN, str(REPO_ROOT / "tests" / "rank_shim.py"), str(REPO_ROOT / "pretrain.py"),
                          *arguments], env=os.environ | conditions, capture_output=True, text=True, timeout=600)
    return root, run


@pytest.mark.slow
def test_slow_preparation_and_glue_on_rank_0_do_not_time_out_the_other_rank(slow_rank0_run):
    root, run = slow_rank0_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stdout + run.stderr
    (run_dir,) = (root / "quickstart").iterdir()
    facts = summary(run_dir)
    assert facts["stop_reason"] == "budget" and facts["glue_score"] is not None
    state = torch.load(run_dir / "checkpoints/final/trainer_state.pt", weights_only=True)
    assert state["fingerprint"]["world_size"] == 2
    assert json.loads((run_dir / "glue" / "glue_results.json").read_text())["glue_score_over"] == ["rte"]


@pytest.mark.slow
def test_the_default_budget_stop_ends_both_ranks_and_rank_0_tells_the_story_once(slow_rank0_run):
    """The default stopping rule (budget, no max_steps) ends both ranks cleanly. The budget is GPU-hours: two
    processes get half of it in wall time each. The run's lines appear once, not once per rank."""
    root, run = slow_rank0_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = (run.stdout + run.stderr).splitlines()
    for start in ("run ", "validation: ", "done: ", "summary: "):
        assert len([line for line in lines if line.startswith(start)]) == 1, start
    (run_dir,) = (root / "quickstart").iterdir()
    facts = summary(run_dir)
    assert facts["stop_reason"] == "budget" and facts["budget_wall_s"] == pytest.approx(BUDGET_HOURS * 3600 / 2)
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_the_ranks_step_without_a_host_sync_per_iteration(slow_rank0_run):
    """Before the agreement every iteration made two or three (the stop decision read a collective at every
    step, at every microbatch after the first, and in the validation schedule). Now an iteration syncs only
    where the ranks read: the first (the pace is not known yet), every `train.check_nonfinite_every` = 10th
    (with the non-finite counts, and on rank 0 the metrics record made there), and the stretch at the end in
    which the budget may run out before the next read (every step, and every microbatch)."""
    root, run = slow_rank0_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for rank in (0, 1):
        iterations = json.loads((root / f"syncs.rank{rank}.json").read_text())
        end_stretch = len(iterations)
        while end_stretch and iterations[end_stretch - 1][1]:
            end_stretch -= 1
        steady = iterations[:end_stretch]
        assert len(steady) > 10 + 1, iterations  # a whole read cycle before the end stretch
        assert [step for step, syncs in steady if syncs] == [step for step, _ in steady if step == 1 or step % 10 == 0]


def test_nccl_joins_with_the_ranks_gpu_as_device_id(monkeypatch):
    """Reached without a GPU: init_process_group is stood in for and must receive the rank's own device."""
    received = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kwargs: received.append(kwargs))
    Distributed(rank=1, world_size=2, local_rank=1).join(torch.device("cuda", 1))
    Distributed(rank=1, world_size=2, local_rank=1).join(torch.device("cpu"))
    Distributed().join(torch.device("cuda", 0))  # one process joins nothing
    assert received == [{"backend": "nccl", "device_id": torch.device("cuda", 1)}, {"backend": "gloo"}]
