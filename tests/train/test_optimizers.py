"""Every optimizer and schedule of the ablation catalogue trains on the quick-start setup, and the
optimizers with their own state resume exactly."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from cramming import CONFIG_DIR
from cramming.pretraining import pretrain
from cramming.engine.schedules import LR_SCHEDULES
from cramming.train.optimizers import OPTIMIZERS
from tests.train.runs import NO_PROBE, STEP_RUN, TINY_DATA, InterruptAt, compose_config, records, summary


# Each optimizer with one schedule, so that every option of both trains once under the budget clock
# (the default users run), in as many runs as the longer list has entries instead of their product; the longer
# list wraps around the shorter, so a new optimizer or schedule joins without an edit here. adamw8bit needs CUDA
# (tests/train/test_low_precision.py).
ON_CPU = [optimizer.name for optimizer in OPTIMIZERS if not optimizer.cuda_only]
SCHEDULES = [*LR_SCHEDULES[1:], LR_SCHEDULES[0]]  # triangle, the recipe's, with the last optimizer (sophia)
PAIRS = [(ON_CPU[index % len(ON_CPU)], SCHEDULES[index % len(SCHEDULES)])
         for index in range(max(len(ON_CPU), len(SCHEDULES)))]


def test_every_optimizer_is_a_choice_of_the_optim_group_and_every_choice_an_optimizer():
    assert sorted(path.stem for path in (CONFIG_DIR / "optim").glob("*.yaml")) == sorted(OPTIMIZERS.names)
    for name in OPTIMIZERS.names:
        assert OmegaConf.load(CONFIG_DIR / "optim" / f"{name}.yaml").name == name


@pytest.mark.parametrize(("name", "schedule"), PAIRS)
def test_each_optimizer_and_schedule_trains_under_the_budget_clock(shared_cache, tmp_path, simulated_clock, name,
                                                                   schedule):
    overrides = [*TINY_DATA, "arch=crammed-bert-tiny", "gpu=cpu", "name=t", NO_PROBE,
                 "budget=0.0006", "impl.microbatch_size=16", "train.batch_size=64", f"output_dir={tmp_path}",
                 "logging.every_steps=1", f"train.optim.name={name}", f"train.lr_schedule={schedule}"]
    run_dir = pretrain(compose_config(overrides))
    losses = [record["loss"] for record in records(run_dir)]
    assert len(losses) >= 3 and all(math.isfinite(loss) for loss in losses)
    assert summary(run_dir)["stop_reason"] == "budget"
    used = OmegaConf.load(run_dir / "config.yaml").train.optim
    defaults = OmegaConf.load(CONFIG_DIR / "optim" / f"{name}.yaml")  # the group's file: its name and defaults
    assert {key: used[key] for key in defaults} == {key: defaults[key] for key in defaults}


def test_an_explicit_hyperparameter_beats_the_optimizers_default(shared_cache, tmp_path):
    run_dir = pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=1",
                                                  "train.optim.name=lion", "train.optim.lr=3e-4"]))
    used = OmegaConf.load(run_dir / "config.yaml").train.optim
    assert (used.lr, used.weight_decay, used.eps) == (3e-4, 0.1, None)  # lion reads no eps


# pytorch-optimizer state; Muon's two kinds of group; Sophia's Hessian estimates (every other step here)
@pytest.mark.slow
@pytest.mark.parametrize("name, extra", [("lion", []), ("muon", []), ("sophia", ["train.optim.hessian_every=2"])])
def test_optimizer_state_resumes_exactly(shared_cache, tmp_path, name, extra):
    straight = pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path / 'a'}", "train.max_steps=4",
                                                   f"train.optim.name={name}", *extra]))
    halted = STEP_RUN + [f"output_dir={tmp_path / 'b'}", "train.max_steps=4", f"train.optim.name={name}", *extra]
    with pytest.raises(KeyboardInterrupt):
        pretrain(compose_config(halted), callbacks=[InterruptAt(3)])  # checkpoint after step 2
    resumed = pretrain(compose_config(halted + ["resume=latest"]))
    assert [r["loss"] for r in records(resumed)] == [r["loss"] for r in records(straight)]
    final = [load_file(run / "checkpoints/final/model.safetensors") for run in (straight, resumed)]
    assert all(torch.equal(final[0][key], final[1][key]) for key in final[0])
