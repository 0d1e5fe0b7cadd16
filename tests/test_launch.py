"""scripts/launch.py: torchrun with the pretraining command checked first. What every process would report
is one line and exit code 2 before any process starts; a process that fails after the launch ends it with one
line and the process's own exit code instead of torchrun's traceback and exit code 1. GPUs are stood in for
by patching torch.cuda, so each case reads the same on any machine."""

from types import SimpleNamespace

import pytest
import torch

from cramming.train.optimizers import OPTIMIZERS
from tests.commands import in_process, in_subprocess
from tests.conftest import REPO_ROOT

PRETRAIN = str(REPO_ROOT / "pretrain.py")


def test_a_bad_setting_stops_the_launch_before_any_process_starts(tmp_path):
    run = in_subprocess("launch", "--nproc_per_node=2", PRETRAIN, "--config-name", "quickstart", "budget=-1",
                        f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == "error: budget=-1.0 must be a positive number (GPU-hours)"  # and nothing else:
    assert not list(tmp_path.iterdir())  # no process started, nothing written


def test_a_process_that_fails_after_the_launch_ends_it_in_one_line_with_its_exit_code(tmp_path):
    script = tmp_path / "fails_on_rank_1.py"
    # rank 1 fails once rank 0 has finished (its marker, then a second for its exit), so that torchrun counts one
    # failed process on a machine of any speed or load, not rank 0 stopped by torchrun as well
    script.write_text("import os, sys, time\n"
                      "marker = os.path.join(os.path.dirname(__file__), 'rank-0-done')\n"
                      "if os.environ['RANK'] == '0':\n"
                      "    open(marker, 'w').close()\n"
                      "    sys.exit(0)\n"
                      "deadline = time.monotonic() + 120\n"
                      "while not os.path.exists(marker) and time.monotonic() < deadline:\n"
                      "    time.sleep(0.05)\n"
                      "time.sleep(1)\n"
                      "print('error: rank 1 cannot go on', file=sys.stderr)\n"
                      "sys.exit(3)\n")
    run = in_subprocess("launch", "--nproc_per_node=2", str(script), cwd=tmp_path, timeout=300)
    assert run.returncode == 3 and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert "error: rank 1 cannot go on" in lines  # the process's own line, then the launcher's
    assert lines[-1] == f"error: {script} stopped on rank 1 with exit code 3, its error above (1 process(es) failed)"


@pytest.fixture
def gpus(monkeypatch):
    """torch.cuda as on a machine with `count` H100s (0: none)."""
    def patch(count: int) -> None:
        for name, value in {"is_available": lambda: count > 0, "device_count": lambda: count,
                            "current_device": lambda: 0, "is_bf16_supported": lambda *a, **k: True,
                            "get_device_name": lambda *a, **k: "NVIDIA H100 80GB HBM3",
                            "get_device_properties": lambda *a, **k: SimpleNamespace(total_memory=80 * 2**30)}.items():
            monkeypatch.setattr(torch.cuda, name, value)
    return patch


@pytest.mark.parametrize(("count", "arguments", "message"), [
    (0, ["--nproc_per_node=4", PRETRAIN, "budget=24", "gpu=a100"],
     "error: gpu=a100 needs a CUDA GPU and none is available; use gpu=cpu or gpu=auto"),
    (1, ["--nproc_per_node=2", PRETRAIN, "budget=24", "gpu=h100"],
     "error: --nproc_per_node=2: each process trains on a GPU of its own and this machine has 1"),
    (0, ["--nproc_per_node=gpu", PRETRAIN, "budget=24", "gpu=a100"],
     "error: --nproc_per_node=gpu: Cuda is not available."),
    (1, ["--nproc_per_node=1", PRETRAIN, "budget=24", "gpu=h100", "optim=lionn"],
     f"error: unknown optim=lionn; choose one of {', '.join(sorted(OPTIMIZERS.names))} — did you mean lion?"),
])
def test_what_every_process_would_refuse_is_refused_before_the_launch(gpus, tmp_path, count, arguments, message):
    gpus(count)
    run = in_process("launch", *arguments, f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("arguments", "message"), [
    (["--nproc_per_node=0"], "error: --nproc_per_node=0: start at least 1 process"),
    (["--nproc_per_node=abc"], "error: --nproc_per_node=abc: Unsupported nproc_per_node value: abc"),
    (["--nnodes=abc", "--nproc_per_node=1"],
     "error: --nnodes=abc: give the number of machines (at least 1), or MIN:MAX with 1 <= MIN <= MAX"),
    (["--nnodes=2:1", "--nproc_per_node=1"],
     "error: --nnodes=2:1: give the number of machines (at least 1), or MIN:MAX with 1 <= MIN <= MAX"),
])
def test_torchruns_own_counts_are_one_line_before_any_process_starts(tmp_path, arguments, message):
    """torchrun itself meets these with an assertion's or int()'s traceback and exit code 1."""
    run = in_process("launch", *arguments, PRETRAIN, "--config-name", "quickstart", f"output_dir={tmp_path}",
                     cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == message
    assert not list(tmp_path.iterdir())


def test_an_unknown_rendezvous_backend_is_one_line(tmp_path):
    run = in_subprocess("launch", "--nproc_per_node=1", "--rdzv_backend=bogus", PRETRAIN, "--config-name",
                        "quickstart", f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: torchrun could not start the processes: The rendezvous backend 'bogus' is not registered")
    assert not list(tmp_path.iterdir())
