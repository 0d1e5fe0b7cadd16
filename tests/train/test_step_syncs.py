"""The training step makes no host sync with the default optimizer, a skipped non-finite step
included: each step of a real run runs under a guard that fails at the first .item(), nonzero or boolean mask.
Non-finite steps are counted on the device and read every `train.check_nonfinite_every` steps."""

import pytest

from cramming.bench.host_sync import HostSyncError, no_host_sync
from cramming.errors import CrammingError
from cramming.train.callbacks import Callback
from cramming.pretraining import pretrain
from cramming.train import loop
from tests.train.runs import STEP_RUN, TINY_RUN, compose_config, only_run, records, summary


class NanLossAt(Callback):
    """Turns the loss of the chosen steps (1-based) into NaN, as a diverging run would."""

    def __init__(self, steps):
        self.steps = steps

    def after_forward(self, state, batch, loss, output):
        return loss * float("nan") if self.steps(state.progress.step + 1) else loss


@pytest.fixture
def guarded_steps(monkeypatch) -> list[int]:
    """Every step of the training loop (train_step) inside no_host_sync(); the steps that ran so."""
    guarded, train_step = [], loop.train_step

    def step_without_a_sync(state, *args):
        with no_host_sync():
            train_step(state, *args)
        guarded.append(state.progress.step + 1)

    monkeypatch.setattr(loop, "train_step", step_without_a_sync)
    return guarded


def test_the_default_step_makes_no_host_sync_even_when_it_skips(cache_dir, tmp_path, guarded_steps):
    cfg = compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=6"])
    run_dir = pretrain(cfg, callbacks=[NanLossAt(lambda step: step == 3)])
    assert guarded_steps == [1, 2, 3, 4, 5, 6]
    facts = summary(run_dir)
    assert facts["stop_reason"] == "max_steps" and facts["nonfinite_skipped"] == 1
    assert [r["step"] for r in records(run_dir)] == [1, 2, 4, 5, 6]  # step 3 has no loss to record


def test_an_optimizer_without_an_on_device_skip_reads_the_flag_and_the_guard_sees_it(cache_dir, tmp_path,
                                                                                     guarded_steps):
    cfg = compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.optim.name=lion"])
    with pytest.raises(HostSyncError, match="_local_scalar_dense|is_nonzero"):
        pretrain(cfg)
    assert guarded_steps == []


def test_a_diverged_run_stops_at_the_first_read_after_the_limit_and_names_the_step_it_was_reached(
        cache_dir, tmp_path, caplog):
    """The defaults users run: counts read every 10 steps (and by each record). Steps 2 on are NaN; the limit of 3 in
    a row is reached at step 4 and read after step 10, whose update (like those of steps 2-9) was never applied."""
    cfg = compose_config(TINY_RUN + ["train=steps", "train.max_steps=30", "train.batch_size=16",
                                     "impl.microbatch_size=16", "train.max_nonfinite_steps=3",
                                     f"output_dir={tmp_path}"])
    with pytest.raises(CrammingError) as stopped:
        pretrain(cfg, callbacks=[NanLossAt(lambda step: step >= 2)])
    assert str(stopped.value).startswith("3 non-finite steps in a row at step 4: the run diverged and stopped; ")
    # read by the metrics record of step 2 (the mean loss of step 1), then by the loop after step 10
    assert [message for message in caplog.messages if "non-finite step" in message] == [
        "steps 1-2: 1 non-finite step skipped (loss: 1), 1 in a row at step 2",
        "steps 3-10: 8 non-finite steps skipped (loss: 8), 9 in a row at step 10"]
    facts = summary(only_run(tmp_path))
    assert facts["stop_reason"] == "non-finite" and facts["steps"] == 9 and facts["nonfinite_skipped"] == 9
    assert [(r["step"], r["nonfinite_skipped"]) for r in records(only_run(tmp_path))] == [(2, 1)]
