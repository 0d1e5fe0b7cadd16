"""The default recipe (train=scaled): the crammed recipe with a floor on its optimizer steps. A short budget keeps
small batches; a day's budget is the crammed recipe exactly; the plan is driven by numbers every rank shares and
a checkpoint holds, so a resumed run plans as the uninterrupted one."""

import math
import re

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from cramming.errors import CrammingError
from cramming.pretraining import pretrain
from cramming.engine.schedules import fitted_batch_size
from cramming.train.loop import Schedule
from tests.commands import in_process, in_subprocess
from tests.train.runs import TINY_RUN, InterruptAt, compose_config, only_run, records, summary


def test_the_final_batch_is_the_expected_sequences_over_min_steps_between_a_microbatch_and_batch_size():
    assert fitted_batch_size(expected_sequences=40_000, microbatch=32, batch_size=8192, min_steps=400) == 100
    assert fitted_batch_size(expected_sequences=1_000, microbatch=32, batch_size=8192, min_steps=400) == 32
    assert fitted_batch_size(expected_sequences=1e9, microbatch=32, batch_size=8192, min_steps=400) == 8192


FITTED = ("name", "min_steps", "lr_batch_exponent", "unigram_bias")  # what train=scaled sets beside train=cramming


def test_scaled_is_the_crammed_recipe_with_a_step_floor_an_lr_that_follows_it_and_the_unigram_start():
    scaled, original = (OmegaConf.to_container(compose_config([f"train={name}"]).train) for name in
                        ("scaled", "cramming"))
    assert compose_config([]).train.name == "scaled"  # the default
    assert (original["min_steps"], original["lr_batch_exponent"], original["unigram_bias"]) == (None, 0.0, False)
    assert (scaled["min_steps"], scaled["lr_batch_exponent"], scaled["unigram_bias"]) == (400, 0.25, True)
    assert {key: value for key, value in scaled.items() if key not in FITTED} == \
        {key: value for key, value in original.items() if key not in FITTED}


def along(train_cfg, microbatch: int, expected_sequences: float, read) -> list:
    """read(schedule, f) at 101 fractions f of a run whose pace projects `expected_sequences`."""
    schedule = Schedule(train_cfg, microbatch)
    out = []
    for percent in range(101):
        schedule.observe(percent / 100, expected_sequences * percent / 100)
        out.append(read(schedule, percent / 100))
    return out


def plan(train_cfg, microbatch: int, expected_sequences: float) -> list[int]:
    """Microbatches per step at 101 fractions of a run whose pace projects `expected_sequences`."""
    return along(train_cfg, microbatch, expected_sequences, Schedule.accumulate)


def lrs(train_cfg, microbatch: int, expected_sequences: float) -> list[float]:
    """The lr at 101 fractions of a run whose pace projects `expected_sequences`."""
    return along(train_cfg, microbatch, expected_sequences, Schedule.lr)


def test_a_day_plans_exactly_as_the_crammed_recipe_and_a_short_budget_keeps_small_steps():
    scaled, original = (compose_config([f"train={name}"]).train for name in ("scaled", "cramming"))
    # 24 hours on a 2080 Ti, at the calculator's conservative 515M tokens for crammed-bert: 4.0M sequences
    day = 515e6 / 128
    assert plan(scaled, 128, day) == plan(original, 128, day)
    assert lrs(scaled, 128, day)[50:] == lrs(original, 128, day)[50:]  # once the day's expectation reaches 8192
    # 5 CPU minutes at about 37 sequences a second: 11,000 sequences, 345 microbatches of 32
    short = plan(scaled, 32, 11_000)
    assert set(short) == {1} and max(plan(original, 32, 11_000)) == 256
    # 150 s on an H200 (614k sequences, microbatch 1024): 1,535 sequences at most, one microbatch; not 8192
    assert max(plan(scaled, 1024, 614_000)) == 1 and max(plan(original, 1024, 614_000)) == 8


def test_the_lr_batch_exponent_raises_the_peak_where_the_batch_stays_small_and_leaves_a_day_as_it_was():
    scaled = compose_config(["train.lr_batch_exponent=0.25"]).train
    plain = compose_config(["train.lr_batch_exponent=0"]).train
    original = compose_config(["train=cramming", "train.lr_batch_exponent=0.25"]).train
    day = 515e6 / 128
    assert lrs(scaled, 128, day)[50:] == lrs(plain, 128, day)[50:]  # the day's expectation reaches 8192
    # 5 CPU minutes: a final batch of one microbatch of 32, (8192 / 32)^0.25 = 4 times the peak
    assert lrs(scaled, 32, 11_000) == pytest.approx([4 * lr for lr in lrs(plain, 32, 11_000)])
    assert lrs(original, 32, 11_000) == lrs(compose_config(["train=cramming"]).train, 32, 11_000)  # no floor: as set
    with pytest.raises(CrammingError, match=r"train.lr_batch_exponent=2.0 must be in \[0, 1\]"):
        OmegaConf.to_object(compose_config(["train.lr_batch_exponent=2"]).train).check()


def test_a_run_counting_steps_ramps_to_batch_size_as_its_steps_are_given():
    steps = compose_config(["train.progress=steps", "train.max_steps=100"]).train
    assert plan(steps, 32, 11_000) == plan(compose_config(["train=steps"]).train, 32, 11_000)
    assert max(plan(steps, 32, 11_000)) == 256


@pytest.mark.slow
def test_the_default_makes_a_step_of_every_microbatch_where_the_original_makes_a_few_large_ones(
        shared_cache, tmp_path, simulated_clock):
    """The command line as a user runs it (the default as a process of its own, the original through the same
    main() in this process), the budget on simulated time: 0.001 GPU-hours = 29 microbatches."""
    steps = {}
    for name, command in (("scaled", in_subprocess), ("cramming", in_process)):
        run = command("pretrain", *TINY_RUN, f"train={name}", "budget=0.001", "train.validation.fractions=[]",
                      f"output_dir={tmp_path / name}", f"cache_dir={shared_cache}", cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        facts = summary(only_run(tmp_path / name))
        assert facts["microbatches"] == math.ceil(0.001 * 3600 / simulated_clock) == 29
        steps[name] = facts["steps"]
    assert steps["scaled"] == 29  # 29 x 32 sequences / 400 steps is below one microbatch: one a step
    assert steps["cramming"] < 15  # the ramp to 8192 sequences: a few steps of up to 29 microbatches


@pytest.mark.slow
def test_a_floor_that_lets_the_batch_grow_resumes_exactly(shared_cache, tmp_path, simulated_clock):
    """min_steps=4 with microbatches of 16: the batch grows with the projected sequences; a resumed run
    projects from the checkpoint's progress and steps exactly as the uninterrupted one."""
    overrides = TINY_RUN + ["budget=0.002", "impl.microbatch_size=16", "train.min_steps=4", "logging.every_steps=1",
                            "checkpoint.interval_minutes=1e-9", "train.validation.fractions=[]",
                            f"cache_dir={shared_cache}"]
    straight = pretrain(compose_config(overrides + [f"output_dir={tmp_path / 'a'}"]))
    with pytest.raises(KeyboardInterrupt):
        pretrain(compose_config(overrides + [f"output_dir={tmp_path / 'b'}"]), callbacks=[InterruptAt(4)])
    resumed = pretrain(compose_config(overrides + [f"output_dir={tmp_path / 'b'}", "resume=latest"]))
    batches = [record["batch_size"] for record in records(straight)]
    assert batches[0] == 16 and max(batches) > 4 * 16  # the ramp grew with the projection
    assert [(r["step"], r["batch_size"], r["loss"]) for r in records(resumed)] == \
        [(r["step"], r["batch_size"], r["loss"]) for r in records(straight)]
    final = [load_file(run / "checkpoints/final/model.safetensors") for run in (straight, resumed)]
    assert all(torch.equal(final[0][key], final[1][key]) for key in final[0])


def test_preflight_shows_the_batch_and_the_learning_rate_over_the_run(shared_cache, tmp_path):
    run = in_process("pretrain", *TINY_RUN, "budget=0.5", "preflight=true", f"output_dir={tmp_path}",
                     f"cache_dir={shared_cache}", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("  schedule (sequences per step, lr)")]
    # a microbatch, at a quarter of the peak, the peak 4 x 1e-3 while the final batch is a microbatch of 32
    assert line.count("%: ") == 5 and "at 0%: 32, 1.00e-03," in line
    assert ("train.min_steps=400 caps the final batch at the expected sequences / 400; the peak lr is "
            "0.001 x (8192 / the final batch)^0.25") in line


@pytest.mark.parametrize("recipe", [[], ["train=cramming", "train.batch_size=256"],
                                    ["train.lr_batch_exponent=0.25", "train.optim.clip_schedule=lr"]],
                         ids=["default", "original", "scaled-lr"])
def test_the_preflights_plan_is_what_the_run_does_step_for_step(shared_cache, tmp_path, simulated_clock, recipe):
    """On the simulated clock the plan's batch and lr at 0, 25, 50, 75 and 95% of the run are those of the step a
    real run begins at or after each point (its records, one a step)."""
    common = ["--config-name", "quickstart", *TINY_RUN[:3], "train.validation.zero_shot=false", "budget=0.002",
              "logging.every_steps=1", "logging.plots=false", *recipe, f"output_dir={tmp_path}"]
    planned = in_process("pretrain", *common, "preflight=true")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    line = next(line for line in planned.stdout.splitlines() if line.startswith("  schedule (sequences per step, lr)"))
    plan = [(int(batch.replace(",", "")), float(lr)) for batch, lr in
            re.findall(r"\d+%: ([\d,]+), ([\d.e+-]+)", line)]
    run = in_process("pretrain", *common)
    assert run.returncode == 0, run.stderr
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    steps = records(run_dir)
    budget = 0.002 * 3600
    starts = [0.0] + [record["elapsed"] / budget for record in steps[:-1]]  # each step's fraction as it began
    done = [(record.get("planned_batch_size", record["batch_size"]), record["lr"]) for record in steps]
    for (batch, lr), point in zip(plan, (0.0, 0.25, 0.5, 0.75, 0.95)):
        step = next((index for index, start in enumerate(starts) if start >= point - 1e-9), len(steps) - 1)
        assert (batch, lr) == pytest.approx(done[step], rel=5e-3), (point, line, done)
