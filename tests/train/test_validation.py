"""The validation curve: held-out rows that training never reads, their loss and accuracy during a run
(off the budget clock), the early stop, and the console's progress bar."""

import io
import json
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from cramming.data.mlm import PackedRows
from cramming.data.prepare import prepare_dataset
from cramming.model import build_mlm_model
from cramming.pretraining import pretrain
from cramming.train.progress_bar import ProgressBar, use_bar
from cramming.train.stopping import BudgetClock, StoppingRule
from cramming.train.validation import validate
from tests.train.runs import NO_PROBE, STEP_RUN, VALIDATION_ROWS, compose_config, only_run, records, summary


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    cfg = compose_config(STEP_RUN)
    prepared, _ = prepare_dataset(OmegaConf.to_object(cfg.data), str(tmp_path_factory.mktemp("cache")))
    return prepared


def test_training_never_reads_the_held_out_rows(dataset):
    assert dataset.held_out_rows == min(VALIDATION_ROWS, dataset.num_rows // 4)
    training = PackedRows(dataset)
    order = dataset.order()
    held_out = {int(row) for row in order[dataset.training_rows:]}
    # two epochs of training positions: each a training row, every training row reached, none held out
    read = {int(order[position % len(training)]) for position in range(2 * len(training))}
    assert read == {int(row) for row in order[: dataset.training_rows]} and not read & held_out
    first_row = training[len(training)]["input_ids"]  # the second epoch starts over at the first row
    assert np.array_equal(first_row, training[0]["input_ids"])


def test_validation_is_fixed_and_starts_near_chance(dataset):
    torch.manual_seed(0)
    model = build_mlm_model(compose_config(STEP_RUN).arch, dataset.meta["vocab_size"])
    first, second = validate(model, dataset, 0.25), validate(model, dataset, 0.25)
    assert first == second and model.training  # the same masks every time; the mode is restored
    assert 0 <= first["val_accuracy"] <= 1 and first["val_loss"] > 0
    # an untrained model is near chance: loss about ln(vocabulary); its accuracy comes from the 10% of
    # masked positions that keep their token (BERT's rule), which a tied decoder tends to echo
    assert first["val_loss"] == pytest.approx(np.log(dataset.meta["vocab_size"]), rel=0.1)
    assert first["val_accuracy"] < 0.1


def test_the_budget_clock_does_not_count_paused_time():
    now = [0.0]  # the clock's time source, moved by hand: the check holds however busy the machine is
    clock = BudgetClock(budget_seconds=100, time_source=lambda: now[0])
    clock.start()
    now[0] += 5
    with clock.paused():
        now[0] += 30
        time.sleep(0.02)
    now[0] += 1
    assert clock.elapsed == 6 and clock.paused_on_clock == 30
    assert clock.paused_seconds >= 0.02  # the wall seconds of the pause, which the summary reports


def test_a_run_above_the_early_stop_loss_stops_there_with_its_reason(tmp_path):
    cfg = compose_config(STEP_RUN + ["train.max_steps=12", "train.validation.fractions=[0.25,0.5]",
                                     "train.validation.early_stop_fraction=0.5", "train.validation.early_stop_loss=1.0",
                                     f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"])
    run_dir = pretrain(cfg)
    facts = summary(run_dir)
    assert facts["stop_reason"] == "early_stop" and facts["steps"] == 6  # the validation at 50% of 12 steps
    assert "is above train.validation.early_stop_loss=1.0" in facts["stop_detail"]
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()
    assert [point["step"] for point in facts["validation"]["curve"]] == [3, 6]  # no second one at the end
    assert records(run_dir)[-1]["val_loss"] == facts["validation"]["final_loss"]


def test_a_run_below_the_early_stop_loss_goes_on(tmp_path):
    cfg = compose_config(STEP_RUN + ["train.validation.early_stop_fraction=0.25",
                                     "train.validation.early_stop_loss=1e6",
                                     f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"])
    facts = summary(pretrain(cfg))
    assert facts["stop_reason"] == "max_steps" and facts["stop_detail"] is None
    assert [point["step"] for point in facts["validation"]["curve"]] == [2, 4, 6, 8]  # 25/50/75% and the end


def test_no_held_out_rows_means_no_validation(tmp_path):
    cfg = compose_config(STEP_RUN + ["data.validation_rows=0", "train.max_steps=2", f"output_dir={tmp_path}",
                                     f"cache_dir={tmp_path / 'cache'}"])
    run_dir = pretrain(cfg)
    assert summary(run_dir)["validation"] is None
    assert not any("val_loss" in record for record in records(only_run(tmp_path)))


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_on_a_terminal_and_plain_lines_elsewhere():
    assert use_bar("auto", Terminal()) and not use_bar("auto", io.StringIO())
    assert use_bar("bar", io.StringIO()) and not use_bar("lines", Terminal())

    class Logger:
        last_record = {"loss": 3.25, "tokens_per_s": 1234.0, "mfu": 0.41}

    clock = BudgetClock(budget_seconds=100, elapsed_before=25)
    stopping = StoppingRule("budget", None, clock)
    screen = Terminal()
    bar = ProgressBar(Logger(), stopping, screen)

    class State:
        class progress:
            step = 7
        clock = stopping.clock

    bar.on_train_start(State)
    bar.on_train_end(State, "budget")
    drawn = screen.getvalue().split("\r")[-2]
    assert (drawn.startswith("training  25%|")
            and "step 7 | 0h01m15s left | loss 3.2500 | 1,234 tok/s | MFU 41.0%" in drawn)


def test_the_zero_shot_probe_adds_its_figures_and_changes_nothing_training_computes(dataset, tmp_path):
    """train.validation.zero_shot (on by default): BLiMP (packaged subset) and bits per character at each
    validation, into metrics.jsonl, summary.json and a plot; the losses of every step are those of the same run
    without it."""
    common = STEP_RUN + ["train.validation.fractions=[0.5]", f"cache_dir={dataset.path.parent.parent}",  # prepared
                         "logging.plots=true"]
    plain = pretrain(compose_config(common + [f"output_dir={tmp_path / 'plain'}"]))
    probe_on = [o for o in common if o != NO_PROBE]  # the default
    probed = pretrain(compose_config(probe_on + [f"output_dir={tmp_path / 'probed'}", "train.validation.blimp_pairs=2",
                                                 "train.validation.bits_rows=2"]))
    assert [r["loss"] for r in records(probed)] == [r["loss"] for r in records(plain)]
    assert [r.get("val_loss") for r in records(probed)] == [r.get("val_loss") for r in records(plain)]
    validated = [r for r in records(probed) if "val_loss" in r]
    assert [r["step"] for r in validated] == [4, 8]
    assert all(0 <= r["blimp"] <= 100 and r["bits_per_char"] > 0 and r["zero_shot_s"] >= 0 for r in validated)
    assert not any("blimp" in r for r in records(plain))
    facts = summary(probed)["validation"]
    assert (facts["final_blimp"] == validated[-1]["blimp"]
            and facts["final_bits_per_char"] == validated[-1]["bits_per_char"])
    assert [point["blimp"] for point in facts["curve"]] == [r["blimp"] for r in validated]
    assert (probed / "plots" / "zero_shot.png").is_file() and not (plain / "plots" / "zero_shot.png").exists()


def test_the_zero_shot_settings_are_checked():
    from cramming.errors import CrammingError
    from cramming.train.config import ValidationConfig

    with pytest.raises(CrammingError, match=r"train.validation.blimp_pairs=101 must be in \[1, 100\]"):
        ValidationConfig(blimp_pairs=101).check()
    with pytest.raises(CrammingError, match="train.validation.bits_rows=0 must be at least 1"):
        ValidationConfig(bits_rows=0).check()
    default = ValidationConfig()
    default.check()
    assert (default.zero_shot, default.blimp_pairs, default.bits_rows) == (True, 50, 16)


def test_zero_shot_scores_a_runs_held_out_rows_in_bits_per_character(dataset, tmp_path):
    """ckpt=<a run>: the checkpoint names its prepared dataset, whose held-out rows the command scores."""
    from tests.commands import in_process
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "blimp").is_dir():
        pytest.skip("BLiMP files not found")
    run_dir = pretrain(compose_config(STEP_RUN + ["train.max_steps=2", "data.validation_rows=8",
                                                  f"output_dir={tmp_path}", f"cache_dir={dataset.path.parent.parent}"]))
    out = tmp_path / "zero_shot"
    run = in_process("zero_shot", f"ckpt={run_dir}", f"blimp_dir={SHARED_DATA / 'blimp'}", "pairs_per_paradigm=1",
                     "bits_rows=2", f"cache_dir={dataset.path.parent.parent}", f"output_dir={out}")
    assert run.returncode == 0, run.stderr
    bits = json.loads((out / "zero_shot_results.json").read_text())["bits"]
    assert bits["source"].startswith("2 held-out rows of ") and bits["bits_per_char"] > 0 and bits["tokens"] > 0
