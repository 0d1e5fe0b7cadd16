"""The training step on a GPU under CUDA's sync debug mode "error": any call that makes the host wait for
the device inside the step (pretraining's cramming.train.loop.train_step, fine-tuning's Step.run) raises. The
first step is left out (it allocates the optimizer state)."""

import contextlib

import pytest
import torch

from cramming.engine.step import Step
from cramming.train.callbacks import Callback
from cramming.pretraining import pretrain
from cramming.train import loop
from tests.gpu.conftest import STEPS, TINY_GPU_RUN, summary
from tests.train.runs import compose_config


@contextlib.contextmanager
def sync_errors():
    """CUDA's sync debug mode "error" inside: a call that makes the host wait for the device raises."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


class NanLossAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def after_forward(self, state, batch, loss, output):
        return loss * float("nan") if state.progress.step + 1 == self.step else loss


@pytest.mark.parametrize("precision", [pytest.param("bf16", marks=pytest.mark.quick), "fp16"])
def test_the_default_step_makes_no_host_sync_on_the_gpu(tmp_path, monkeypatch, precision):
    guarded, train_step = [], loop.train_step

    def step_in_error_mode(state, *args):
        if state.progress.step == 0:
            return train_step(state, *args)
        with sync_errors():
            train_step(state, *args)
        guarded.append(state.progress.step + 1)

    monkeypatch.setattr(loop, "train_step", step_in_error_mode)
    cfg = compose_config(TINY_GPU_RUN + STEPS + ["impl.compile=false", f"impl.precision={precision}",
                                                 f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"])
    run_dir = pretrain(cfg, callbacks=[NanLossAt(3)])
    assert guarded == [2, 3, 4, 5, 6]
    assert summary(run_dir)["nonfinite_skipped"] == 1


def test_the_compiled_fine_tuning_step_makes_no_host_sync_on_the_gpu(tmp_path, monkeypatch):
    """GLUE's fine-tuning as eval.compile's default runs it on a GPU: compiled, static widths. Every sentence has
    the same width, so the graphs exist after the first step; the steps after it run in error mode."""
    from cramming.eval.batching import EncodedSplit
    from cramming.eval.encoders import open_encoder
    from cramming.eval.finetune import finetune
    from cramming.eval.tasks.registry import GlueConfig, task_named
    from cramming.engine.precision import Precision
    from tests.eval.conftest import make_checkpoint

    texts = [f"The cat number {i} sat on the mat." for i in range(64)]
    encoder = open_encoder(str(make_checkpoint(tmp_path / "ckpt", texts, vocab_size=100)), 0.1)
    rows = encoder.tokenizer(texts)["input_ids"]
    train = EncodedSplit(rows, torch.arange(64) % 2, "the test's rows")
    guarded, run = [], Step.run

    def run_in_error_mode(step, state, *args):
        if not guarded:
            guarded.append("compiled")
            return run(step, state, *args)
        with sync_errors():
            run(step, state, *args)
        guarded.append(state.step_loss.shape)

    monkeypatch.setattr(Step, "run", run_in_error_mode)
    device, task = torch.device("cuda"), task_named("rte")()
    cfg = GlueConfig(epochs=1)  # eval.compile null: compiled on the GPU
    history = finetune(task.model(encoder, cfg.dropout, 0), train, {}, cfg, device,
                       Precision.resolve("auto", device, "eval.precision"), 0, encoder.tokenizer.pad_token_id, "rte",
                       task.score)
    assert len(guarded) == 4 and len(history) == 1  # 64 rows: the first step compiled, three guarded
