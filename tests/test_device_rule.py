"""One device rule for every command, checked without a GPU: with torch.cuda patched to report one H100,
each command's own entry point (its main(), as `python <command>` runs it) must hand
`torch.cuda.set_device` an index, not an index-less `cuda` device, which torch rejects: on a real GPU,
`eval_glue.py`, the benchmark, the calculator's fit or the GPU check would crash there.

The patched set_device checks its argument as torch does, records it and stops the command there: past
that point the command would need a real GPU."""

import contextlib
import io
import sys
from types import SimpleNamespace

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from cramming.cli import benchmark, calculator, eval_glue, gpu_check, pretrain
from cramming.engine.device import prepare_device, resolve_device
from tests.eval.conftest import make_checkpoint


class ReachedTheGpu(BaseException):
    """Raised by the patched set_device: not an Exception, so no error boundary turns it into a message."""


@pytest.fixture
def one_h100(monkeypatch):
    """torch.cuda as on a machine with one H100; returns the list of what set_device received."""
    received = []

    def set_device(device):
        received.append(device)
        torch.cuda._utils._get_device_index(device)  # torch's own check: raises for an index-less device
        raise ReachedTheGpu

    def query(answer):
        """A device query that records the device it was asked about (none: the current one)."""
        def ask(device=None):
            asked.append(device)
            return answer
        return ask

    asked = []
    properties = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30, major=9, minor=0)
    for name, value in {"is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
                        "set_device": set_device, "is_bf16_supported": lambda *a, **k: True,
                        "get_device_name": query(properties.name), "get_device_capability": query((9, 0)),
                        "get_device_properties": query(properties)}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    yield received
    # every query that named a device named it with its index
    assert all(device is None or isinstance(device, int) or device.index is not None for device in asked), asked
    GlobalHydra.instance().clear()  # the command stopped inside its Hydra app


def run_until_the_gpu(module, tmp_path, monkeypatch, *arguments: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [module.__name__, *arguments])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with pytest.raises(ReachedTheGpu):
            module.main()


def test_resolve_device_always_gives_a_cuda_device_its_index(one_h100):
    assert resolve_device("auto", "device") == torch.device("cuda", 0)
    assert resolve_device("cuda", "device") == torch.device("cuda", 0)
    assert resolve_device("cuda:0", "device") == torch.device("cuda", 0)
    with pytest.raises(Exception, match="device=cuda:1 but this machine has 1 CUDA GPU"):
        resolve_device("cuda:1", "device")
    with pytest.raises(ReachedTheGpu):
        prepare_device(torch.device("cuda"))  # an index-less device is prepared as the current one
    assert one_h100 == [0]


def test_eval_glue_hands_set_device_an_index(one_h100, tmp_path, monkeypatch):
    checkpoint = make_checkpoint(tmp_path / "ckpt", [f"sentence {i} of a few words" for i in range(50)], vocab_size=40)
    run_until_the_gpu(eval_glue, tmp_path, monkeypatch, f"ckpt={checkpoint}", "eval.tasks=[rte]",
                      f"output_dir={tmp_path / 'out'}")
    assert one_h100 == [0]


def test_the_benchmark_hands_set_device_an_index(one_h100, tmp_path, monkeypatch):
    run_until_the_gpu(benchmark, tmp_path, monkeypatch, "arch=crammed-bert-tiny", "benchmark.dtype=bf16",
                      f"benchmark.output_dir={tmp_path}")
    assert one_h100 == [0]


def test_the_calculators_fit_hands_set_device_an_index(one_h100, tmp_path, monkeypatch):
    run_until_the_gpu(calculator, tmp_path, monkeypatch, "budget=1", "gpu=h100", "fit=true",
                      f"cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'out'}")
    assert one_h100 == [0]


@pytest.mark.parametrize("options", [[], ["impl.fp8=true", "train.sparsity.method=semi-structured-2:4"]])
def test_pretraining_hands_set_device_its_local_rank(one_h100, tmp_path, monkeypatch, options):
    """With the GPU-only options on, their capability queries run first, on the same indexed device."""
    run_until_the_gpu(pretrain, tmp_path, monkeypatch, "data=embedded", "arch=crammed-bert-tiny", "gpu=auto",
                      f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}", *options)
    assert one_h100 == [0]


@pytest.mark.parametrize("stage", ["bench", "cram"])
def test_each_gpu_check_stage_hands_set_device_an_index(one_h100, tmp_path, monkeypatch, stage):
    run_until_the_gpu(gpu_check, tmp_path, monkeypatch, f"stage={stage}", f"output_dir={tmp_path / 'out'}")
    assert one_h100 == [0]
