"""The training step on a GPU under CUDA's sync debug mode "error": any call that makes the host wait for
the device inside the step (cramming.gradient_step.Step.run) raises. The first step is left out (it allocates
the optimizer state)."""

import pytest
import torch

from cramming.gradient_step import Step
from cramming.train.callbacks import Callback
from cramming.pretraining import pretrain
from tests.gpu.conftest import STEPS, TINY_GPU_RUN, summary
from tests.train.runs import compose_config


class NanLossAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def after_forward(self, state, batch, loss, output):
        return loss * float("nan") if state.progress.step + 1 == self.step else loss


@pytest.mark.parametrize("precision", [pytest.param("bf16", marks=pytest.mark.quick), "fp16"])
def test_the_default_step_makes_no_host_sync_on_the_gpu(tmp_path, monkeypatch, precision):
    guarded, run = [], Step.run

    def run_in_error_mode(step, state, *args):
        if state.progress.step == 0:
            return run(step, state, *args)
        torch.cuda.set_sync_debug_mode("error")
        try:
            run(step, state, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        guarded.append(state.progress.step + 1)

    monkeypatch.setattr(Step, "run", run_in_error_mode)
    cfg = compose_config(TINY_GPU_RUN + STEPS + ["impl.compile=false", f"impl.precision={precision}",
                                                 f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"])
    run_dir = pretrain(cfg, callbacks=[NanLossAt(3)])
    assert guarded == [2, 3, 4, 5, 6]
    assert summary(run_dir)["nonfinite_skipped"] == 1
