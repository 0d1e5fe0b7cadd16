"""The training techniques of the ablation catalogue (cramming.train.techniques): each trains under the
budget clock on the quick-start setup, resumes exactly, and does what it says to the model."""

import logging
import math

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from cramming.model import build_mlm_model
from cramming.model.config import as_model_config
from cramming.train.callbacks.layer_drop import drop_rates
from cramming.train.callbacks.stacking import Stacking
from cramming.train.sam import SharpnessAwareStep
from cramming.train.state import Progress, TrainState
from cramming.train.trainer import pretrain
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, InterruptAt, compose_config, records, summary

TECHNIQUES = {
    "sam": ["train.optim.sam_rho=0.05"],
    "layer-drop": ["train.layer_drop.max_rate=0.5", "arch.num_layers=4"],
    "stacking": ["train.stacking.stages=[2,4]", "arch.num_layers=4"],
    "activation-checkpointing": ["impl.activation_checkpointing=true"],
}
STEPS = STEP_RUN + ["train.batch_size=16"]  # one microbatch a step: short


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """Three plain steps, for the techniques that must not change a number."""
    output_dir = tmp_path_factory.mktemp("plain")
    return pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={output_dir}",
                                            f"cache_dir={output_dir / 'cache'}"]))


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_each_technique_trains_the_quick_start_under_the_budget_clock(cache_dir, tmp_path, technique):
    overrides = [*TECHNIQUES[technique], "budget=0.001", "impl.microbatch_size=16", "train.batch_size=16",
                 f"output_dir={tmp_path}", "logging.every_steps=1"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        run_dir = pretrain(compose("quickstart", overrides=overrides))
    losses = [record["loss"] for record in records(run_dir)]
    assert len(losses) >= 3 and all(math.isfinite(loss) for loss in losses)
    assert summary(run_dir)["stop_reason"] == "budget"


INIT_SCHEMES = {
    "scaled": [], "small": [], "skipinit": [], "rezero": ["arch.norm_scheme=none"],
    "tfixup": ["arch.norm_scheme=none"], "deepnorm": ["arch.norm_scheme=post"],
}


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_each_init_scheme_trains_three_steps_of_the_quick_start(cache_dir, tmp_path, scheme):
    overrides = [f"arch.init_scheme={scheme}", *INIT_SCHEMES[scheme], "train.max_steps=3", "impl.microbatch_size=16",
                 "train.batch_size=16", f"output_dir={tmp_path}", "logging.every_steps=1"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        run_dir = pretrain(compose("quickstart", overrides=overrides))
    losses = [record["loss"] for record in records(run_dir)]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)


def straight_and_resumed(tmp_path, overrides: list[str], interrupt_before: int):
    """A step-driven run, and the same run interrupted before the given step and resumed."""
    straight = pretrain(compose_config(STEPS + [f"output_dir={tmp_path / 'a'}", *overrides]))
    halted = STEPS + [f"output_dir={tmp_path / 'b'}", *overrides]
    with pytest.raises(KeyboardInterrupt):
        pretrain(compose_config(halted), callbacks=[InterruptAt(interrupt_before)])
    return straight, pretrain(compose_config(halted + ["resume=latest"]))


def assert_same_training(a, b) -> None:
    assert [r["loss"] for r in records(a)] == [r["loss"] for r in records(b)]
    final = [load_file(run / "checkpoints/final/model.safetensors") for run in (a, b)]
    assert all(torch.equal(final[0][key], final[1][key]) for key in final[0])


@pytest.mark.parametrize("technique", ["sam", "layer-drop"])
def test_a_technique_resumes_exactly(cache_dir, tmp_path, technique):
    assert_same_training(*straight_and_resumed(tmp_path, [*TECHNIQUES[technique], "train.max_steps=5"], 4))


def test_stacking_resumes_exactly_after_a_growth_step(cache_dir, tmp_path, caplog):
    """Stages [2, 4] over 6 steps: the model grows before step 4 (progress 3/6); the checkpoint after
    step 4 holds the grown model and the copied optimizer state, and the resumed run goes on from it."""
    with caplog.at_level(logging.INFO, logger="pretrain"):
        straight, resumed = straight_and_resumed(tmp_path, [*TECHNIQUES["stacking"], "train.max_steps=6"], 5)
    assert "stacking: grew from 2 to 4 layers at step 3 (50% of training)" in caplog.text
    assert_same_training(straight, resumed)


def test_sam_with_a_vanishing_rho_is_the_plain_step(cache_dir, tmp_path, plain_run):
    """Two passes at (numerically) the same weights give the same gradient: the second pass and the way
    back change nothing."""
    sam = pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={tmp_path}", "train.optim.sam_rho=1e-30"]))
    assert_same_training(plain_run, sam)


def test_sam_moves_the_weights_by_rho_along_the_normalized_gradient():
    model = torch.nn.Linear(3, 2)
    model.weight.grad, model.bias.grad = torch.full((2, 3), 3.0), torch.full((2,), 4.0)
    before = [p.detach().clone() for p in model.parameters()]
    step = SharpnessAwareStep.__new__(SharpnessAwareStep)
    step.rho, step.scaler = 0.1, torch.amp.GradScaler("cpu", enabled=False)
    _, moves = step._ascend(model)
    norm = math.sqrt(6 * 9 + 2 * 16)
    assert torch.allclose(moves[0], torch.full((2, 3), 0.1 * 3 / norm))
    assert torch.allclose(moves[1], torch.full((2,), 0.1 * 4 / norm))
    assert all(torch.equal(p, b + m) for p, b, m in zip(model.parameters(), before, moves))


def test_activation_checkpointing_changes_no_number(cache_dir, tmp_path, plain_run):
    recomputed = pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={tmp_path}",
                                                  "impl.activation_checkpointing=true"]))
    assert_same_training(plain_run, recomputed)


def test_layer_drop_rates_rise_with_depth_and_progress():
    early, late = drop_rates(0.05, 4, 0.5, 0.1), drop_rates(1.0, 4, 0.5, 0.1)
    assert torch.all(early[1:] > early[:-1]) and torch.all(late > early)
    assert late[-1] == pytest.approx(0.5 * (1 - math.exp(-10)))
    assert drop_rates(0.0, 4, 0.5, 0.1).sum() == 0


def tiny_model(num_layers: int):
    cfg = compose_config(["data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", f"arch.num_layers={num_layers}"])
    return build_mlm_model(as_model_config(cfg.arch), 64)


def test_skipped_layers_cost_nothing_and_get_no_gradient():
    model = tiny_model(3)
    model.bert.skip_layers = frozenset({1})
    input_ids = torch.randint(5, 64, (2, 16))
    positions = torch.tensor([[1, 4], [2, 3]])
    model(input_ids, labels=input_ids, masked_positions=positions).loss.backward()
    assert all(p.grad is None for p in model.bert.layer[1].parameters())
    assert all(p.grad is not None for p in model.bert.layer[2].parameters())
    model.zero_grad(set_to_none=True)
    with torch.no_grad():  # skipping every layer: the embeddings at the masked positions, normed
        model.bert.skip_layers = frozenset({0, 1, 2})
        hidden = model.bert(input_ids, positions=positions)
        embedded = model.bert.embeddings(input_ids)
    assert torch.equal(hidden, model.bert.final_norm(embedded.gather(1, positions[:, :, None].expand(-1, -1, 128))))


def test_stacking_copies_layers_and_their_optimizer_state():
    model = tiny_model(4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, optimizer, Progress(), None, None, torch.device("cpu"))
    stacking = Stacking([2, 4], None)
    stacking.on_train_start(state)
    assert model.bert.skip_layers == {2, 3}
    input_ids = torch.randint(5, 64, (2, 16))
    model(input_ids, labels=input_ids, masked_positions=torch.tensor([[1, 4], [2, 3]])).loss.backward()
    optimizer.step()
    state.fraction = 0.5
    stacking.before_step(state)
    assert model.bert.skip_layers == frozenset() and stacking.state_dict() == {"stage": 1}
    for target, source in ((2, 0), (3, 1)):
        for (name, p_target), p_source in zip(model.bert.layer[target].named_parameters(),
                                              model.bert.layer[source].parameters()):
            assert torch.equal(p_target, p_source), name
            assert torch.equal(optimizer.state[p_target]["exp_avg"], optimizer.state[p_source]["exp_avg"])
            assert optimizer.state[p_target]["exp_avg"] is not optimizer.state[p_source]["exp_avg"]
