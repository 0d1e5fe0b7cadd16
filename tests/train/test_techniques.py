"""The training techniques of the ablation catalogue (cramming.train.techniques): each trains under the
budget clock on the quick-start setup, resumes exactly, and does what it says to the model."""

import logging
import math
import shutil

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from cramming.data.prepare import prepare_dataset
from cramming.data.stream import Microbatches
from cramming.engine.schedules import clip_threshold
from cramming.errors import CrammingError
from cramming.model import build_mlm_model
from cramming.model.checkpoint import load_pretrained, read_config
from cramming.model.config import as_model_config
from cramming.pretraining import pretrain
from cramming.train.callbacks import Callback, TrainState
from cramming.train.optimizers import SophiaG
from cramming.train.stopping import Progress
from cramming.train.techniques.distillation import distillation_loss
from cramming.train.techniques.ema import Ema
from cramming.train.techniques.importance_sampling import ImportanceSampling
from cramming.train.techniques.layer_drop import drop_rates
from cramming.train.techniques.mask_schedule import MaskSchedule, rate_at
from cramming.train.techniques.sam import SharpnessAware
from cramming.train.techniques.sophia_hessian import SophiaHessian
from cramming.train.techniques.sparsity import (Sparsity, gradual_density, lottery_ticket, magnitude_mask,
                                                 two_of_four_mask)
from cramming.train.techniques.stacking import Stacking
from cramming.train.techniques.unigram_bias import log_unigram
from cramming.train.techniques.z_loss import z_penalty
from tests.conftest import REPO_ROOT
from tests.test_bad_inputs import run_command
from tests.train.runs import NO_PROBE, STEP_RUN, InterruptAt, compose_config, records, summary

# Techniques that combine, run together to keep the suite short; each trains under the budget clock.
UNDER_THE_CLOCK = {
    "sam+activation-checkpointing+importance-sampling": [
        "train.optim.sam_rho=0.05", "impl.activation_checkpointing=true", "train.sampling=importance"],
    "layer-drop+magnitude-pruning": [
        "train.layer_drop.max_rate=0.5", "arch.num_layers=4", "train.sparsity.method=magnitude",
        "train.sparsity.density=0.25", "train.sparsity.start=0", "train.sparsity.end=0.5"],
    "stacking+z-loss": ["train.stacking.stages=[2,4]", "arch.num_layers=4", "train.z_loss.weight=1e-4"],
    "unigram-bias+mask-schedule+clip-follows-lr": [
        "train.unigram_bias=true", "train.mask_schedule=[0.3,0.2]",
        "train.optim.clip_schedule=lr"],
}
STEPS = STEP_RUN + ["train.batch_size=16"]  # one microbatch a step: short


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, session_cache):
    """Three plain steps, for the techniques that must not change a number; it keeps the checkpoint after
    step 2 (progress 1/3) for a lottery ticket to rewind to."""
    output_dir = tmp_path_factory.mktemp("plain")
    return pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={output_dir}",
                                            f"cache_dir={session_cache}", "checkpoint.keep_at=[0.3]",
                                            "checkpoint.keep_last=1"]))


@pytest.mark.slow
@pytest.mark.parametrize("techniques", UNDER_THE_CLOCK)
def test_the_techniques_train_the_quick_start_under_the_budget_clock(shared_cache, tmp_path, simulated_clock,
                                                                     techniques):
    overrides = [*UNDER_THE_CLOCK[techniques], NO_PROBE, "budget=0.001", "impl.microbatch_size=16",
                 "train.batch_size=16", f"output_dir={tmp_path}", "logging.every_steps=1"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        run_dir = pretrain(compose("quickstart", overrides=overrides))
    losses = [record["loss"] for record in records(run_dir)]
    assert len(losses) >= 3 and all(math.isfinite(loss) for loss in losses)
    assert summary(run_dir)["stop_reason"] == "budget"
    if "magnitude" in techniques:  # pruned to the density by progress 0.5
        matrices = layer_matrices(run_dir)
        assert len(matrices) == 16  # qkv, attention output, intermediate, output in each of 4 layers
        for name, weight in matrices.items():
            assert (weight != 0).sum().item() == round(0.25 * weight.numel()), name
        weights = load_file(run_dir / "checkpoints" / "final" / "model.safetensors")
        assert (weights["bert.embeddings.word_embeddings.weight"] != 0).all()  # embeddings stay dense


INIT_SCHEMES = {
    "scaled": [], "small": [], "skipinit": [], "rezero": ["arch.norm_scheme=none"],
    "tfixup": ["arch.norm_scheme=none"], "deepnorm": ["arch.norm_scheme=post"],
}


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_each_init_scheme_trains_three_steps_of_the_quick_start(shared_cache, tmp_path, scheme):
    overrides = [f"arch.init_scheme={scheme}", *INIT_SCHEMES[scheme], NO_PROBE, "train.max_steps=3",
                 "impl.microbatch_size=16", "train.batch_size=16", f"output_dir={tmp_path}", "logging.every_steps=1"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        run_dir = pretrain(compose("quickstart", overrides=overrides))
    losses = [record["loss"] for record in records(run_dir)]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)


def bare_state(model: torch.nn.Module, optimizer=None) -> TrainState:
    """The state a technique sees at step 0 of a run with no clock or directory: for calling its events directly."""
    return TrainState(model=model, optimizer=optimizer, progress=Progress(), clock=None, run_dir=None,
                      device=torch.device("cpu"))


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


@pytest.mark.slow
def test_sam_with_importance_sampling_resumes_exactly(shared_cache, tmp_path):
    both = ["train.optim.sam_rho=0.05", "train.sampling=importance", "train.max_steps=5"]
    assert_same_training(*straight_and_resumed(tmp_path, both, 4))


@pytest.mark.slow
def test_layer_drop_rigl_and_distillation_resume_exactly(shared_cache, tmp_path, plain_run):
    """A 4-layer student of the 2-layer plain run (same data and tokenizer), dropping layers, with RigL
    rewiring its masks every step: the resumed run equals the straight one; the masks moved and kept
    their density."""
    overrides = ["arch.num_layers=4", "train.layer_drop.max_rate=0.5", "train.sparsity.method=rigl",
                 "train.sparsity.density=0.5", "train.sparsity.update_every=1", f"train.distill.teacher={plain_run}",
                 "train.distill.alpha=0.7", "train.max_steps=5"]
    straight, resumed = straight_and_resumed(tmp_path, overrides, 4)
    assert_same_training(straight, resumed)
    final = torch.load(straight / "checkpoints" / "final" / "trainer_state.pt", weights_only=True)["callbacks"][
        "Sparsity"]["masks"]
    initial = Sparsity("rigl", 0.5, 0.1, 0.8, 1, seed=0)  # the run's seed: its random masks at step 0
    initial.on_train_start(bare_state(tiny_model(4)))
    assert sum(not torch.equal(mask, initial.masks[name]) for name, mask in final.items()) >= 4
    for name, mask in final.items():
        assert mask.sum().item() == round(0.5 * mask.numel()), name
    for name, weight in layer_matrices(straight).items():
        assert ((weight != 0) <= final[name]).all(), name  # nothing outside the mask


@pytest.mark.slow
def test_stacking_resumes_exactly_after_a_growth_step(shared_cache, tmp_path, caplog):
    """Stages [2, 4] over 6 steps: the model grows before step 4 (progress 3/6); the checkpoint after
    step 4 holds the grown model and the copied optimizer state, and the resumed run goes on from it."""
    with caplog.at_level(logging.INFO, logger="pretrain"):
        straight, resumed = straight_and_resumed(tmp_path, ["train.stacking.stages=[2,4]", "arch.num_layers=4",
                                                                  "train.max_steps=6"], 5)
    assert "stacking: grew from 2 to 4 layers at step 3 (50% of training)" in caplog.text
    assert_same_training(straight, resumed)


def test_sam_with_a_vanishing_rho_is_the_plain_step(shared_cache, tmp_path, plain_run):
    """Two passes at (numerically) the same weights give the same gradient: the second pass and the way
    back change nothing."""
    sam = pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={tmp_path}", "train.optim.sam_rho=1e-30"]))
    assert_same_training(plain_run, sam)


def test_sam_moves_the_weights_by_rho_along_the_normalized_gradient():
    model = torch.nn.Linear(3, 2)
    model.weight.grad, model.bias.grad = torch.full((2, 3), 3.0), torch.full((2,), 4.0)
    before = [p.detach().clone() for p in model.parameters()]
    _, originals = SharpnessAware(0.1)._ascend(model, torch.amp.GradScaler("cpu", enabled=False))
    norm = math.sqrt(6 * 9 + 2 * 16)
    assert torch.allclose(model.weight - before[0], torch.full((2, 3), 0.1 * 3 / norm))
    assert torch.allclose(model.bias - before[1], torch.full((2,), 0.1 * 4 / norm))
    assert all(torch.equal(original, b) for original, b in zip(originals, before))


def test_activation_checkpointing_changes_no_number(shared_cache, tmp_path, plain_run):
    recomputed = pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={tmp_path}",
                                                  "impl.activation_checkpointing=true"]))
    assert_same_training(plain_run, recomputed)


def test_layer_drop_rates_rise_with_depth_and_progress():
    early, late = drop_rates(0.05, 4, 0.5, 0.1), drop_rates(1.0, 4, 0.5, 0.1)
    assert torch.all(early[1:] > early[:-1]) and torch.all(late > early)
    assert late[-1] == pytest.approx(0.5 * (1 - math.exp(-10)))
    assert drop_rates(0.0, 4, 0.5, 0.1).sum() == 0


def tiny_model(num_layers: int, vocab_size: int = 64):
    cfg = compose_config(["data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", f"arch.num_layers={num_layers}"])
    return build_mlm_model(as_model_config(cfg.arch), vocab_size)


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
    state = bare_state(model, optimizer)
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


def importance_sampling_on_real_rows(cache):
    data = OmegaConf.to_object(compose_config(STEPS).data)
    dataset, _ = prepare_dataset(data, cache)
    sampling = ImportanceSampling(seed=0)
    return sampling, sampling.stream(Microbatches(dataset, 64, 0, 1, 0.25, 0), 0), dataset.meta["vocab_size"]


def test_importance_sampling_draws_high_loss_rows_more_and_weights_them_down(shared_cache):
    sampling, stream, _ = importance_sampling_on_real_rows(shared_cache)
    first = next(stream)  # nothing seen yet: uniform, every weight 1
    assert torch.equal(first["sample_weights"], torch.ones(64))
    n = len(sampling.losses)
    sampling.losses[:] = 1.0
    sampling.losses[: n // 4] = 9.0  # a hard quarter
    sampling.losses[n - 10:] = np.nan  # unseen rows count at the largest loss seen
    p = sampling.probabilities()
    assert p.sum() == pytest.approx(1.0) and p[n - 1] == p[0] > p[n // 2]
    table = np.nan_to_num(sampling.losses, nan=9.0)
    weights = 1 / (n * p)
    assert (p * weights * table).sum() == pytest.approx(table.mean())  # the weighted loss is unbiased
    draws = np.concatenate([next(stream)["sample_positions"].numpy() for _ in range(20)])
    hard = (draws < n // 4).mean()
    expected = p[: n // 4].sum()  # 0.9 * 9/(9 + 3) + 0.1/4 = 0.7 of the draws, not 0.25
    assert abs(hard - expected) < 0.08 and hard > 0.55
    batch = next(stream)
    positions, weights = batch["sample_positions"].numpy(), batch["sample_weights"].numpy()
    assert np.allclose(weights, 1 / (n * p[positions]), rtol=1e-5) and weights.max() <= 10


def test_importance_sampling_records_each_rows_loss_and_returns_the_weighted_mean(shared_cache):
    sampling, stream, vocab_size = importance_sampling_on_real_rows(shared_cache)
    batch = next(stream)
    model = tiny_model(2, vocab_size)
    output = model(**{key: value for key, value in batch.items() if not key.startswith("sample_")})
    batch["sample_weights"] = torch.linspace(0.5, 2.0, 64)
    weighted = sampling.after_forward(None, batch, output.loss, output)
    labels = batch["labels"].gather(1, batch["masked_positions"])  # (B, k)
    token_losses = torch.nn.functional.cross_entropy(output.logits.transpose(1, 2), labels, reduction="none",
                                                     ignore_index=-100)
    counted = labels != -100
    assert torch.allclose(weighted, (batch["sample_weights"][:, None] * token_losses)[counted].sum() / counted.sum())
    sampling.probabilities()  # records the pending losses
    rows = batch["sample_positions"].numpy()
    once = [b for b in range(64) if (rows == rows[b]).sum() == 1]  # a row drawn twice keeps its last loss
    expected = torch.stack([token_losses[b][counted[b]].mean() for b in once])
    assert len(once) > 32 and np.allclose(sampling.losses[rows[once]], expected.detach().numpy(), rtol=1e-5)


def test_a_teacher_with_another_tokenizer_is_refused(shared_cache, tmp_path, plain_run):
    """Another vocabulary size is refused from the teacher's config.json; the same size from another tokenizer
    (cased text here) once the data is prepared, before the run's folder exists."""
    other = STEPS + [f"output_dir={tmp_path}", "data.tokenizer.vocab_size=400", f"train.distill.teacher={plain_run}"]
    with pytest.raises(CrammingError, match="its vocabulary has 4096 tokens and this run's data.tokenizer.vocab_size="
                                            "400: the teacher must share the student's tokenizer"):
        pretrain(compose_config(other))
    cased = STEPS + [f"output_dir={tmp_path}", "data.normalize.lowercase=false", f"train.distill.teacher={plain_run}"]
    with pytest.raises(CrammingError, match="was trained with another tokenizer than this dataset's"):
        pretrain(compose_config(cased))
    assert not any(tmp_path.iterdir())


def test_the_distillation_term_is_the_softened_kl_divergence():
    student, teacher = torch.randn(2, 3, 11), torch.randn(2, 3, 11)
    labels = torch.tensor([[4, 5, -100], [6, 7, 8]])
    expected = torch.stack([
        (teacher[b, k] / 2).softmax(-1) @ ((teacher[b, k] / 2).log_softmax(-1) - (student[b, k] / 2).log_softmax(-1))
        for b, k in [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]]).mean() * 4
    assert distillation_loss(student, teacher, labels, 2.0) == pytest.approx(expected.item(), rel=1e-5)
    assert distillation_loss(teacher, teacher, labels, 2.0) == pytest.approx(0.0, abs=1e-6)


def layer_matrices(run_dir, checkpoint: str = "final") -> dict[str, torch.Tensor]:
    weights = load_file(run_dir / "checkpoints" / checkpoint / "model.safetensors")
    return {name: w for name, w in weights.items() if w.dim() == 2 and ".layer." in f".{name}"}


def test_magnitude_masks_keep_exactly_the_largest_and_the_schedule_is_cubic():
    weight = torch.tensor([[0.5, -3.0, 0.1], [2.0, 0.5, -0.5]])
    assert magnitude_mask(weight, 0.5).tolist() == [[True, True, False], [True, False, False]]  # ties: first
    assert gradual_density(0.05, 0.2, 0.1, 0.5) == 1.0 and gradual_density(0.9, 0.2, 0.1, 0.5) == 0.2
    assert gradual_density(0.3, 0.2, 0.1, 0.5) == pytest.approx(0.2 + 0.8 * 0.5**3)


def test_a_checkpoint_from_before_the_techniques_resumes(shared_cache, tmp_path, plain_run):
    """A checkpoint written before train.sampling, train.sparsity, ... existed resumes when they are at
    their defaults (what the older code did); at another value the settings differ."""
    shutil.copytree(plain_run, tmp_path / "older")
    checkpoint = tmp_path / "older" / "checkpoints" / "final"
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    for key in ("sampling", "sparsity", "distill", "layer_drop", "stacking"):
        del state["fingerprint"]["train"][key]
    del state["fingerprint"]["train"]["optim"]["sam_rho"]
    torch.save(state, checkpoint / "trainer_state.pt")
    common = STEPS + ["train.max_steps=3", f"output_dir={tmp_path / 'out'}", f"resume={checkpoint}"]
    assert summary(pretrain(compose_config(common)))["stop_reason"] == "max_steps"
    with pytest.raises(CrammingError, match="train.sampling: \\(absent\\) in the checkpoint, importance now"):
        pretrain(compose_config(common + ["train.sampling=importance"]))


def test_sophia_estimates_the_gauss_newton_diagonal_and_clips_its_update():
    """SophiaHessian's estimate is the squared gradient of the loss on labels sampled from the model
    (times the tokens); SophiaG's step moves no coordinate by more than lr."""
    model = tiny_model(2)
    optimizer = SophiaG(model.parameters(), lr=0.01, betas=(0.9, 0.5), gamma=0.04, weight_decay=0.0)
    state = bare_state(model, optimizer)
    batch = {"input_ids": torch.randint(5, 64, (2, 16)), "masked_positions": torch.tensor([[1, 4], [2, 3]])}
    batch["labels"] = torch.full((2, 16), -100).scatter(1, batch["masked_positions"], 7)
    output = model(**batch)
    hessian = SophiaHessian(every=1, seed=0)
    assert hessian.after_forward(state, batch, output.loss, output) is output.loss
    output.loss.backward()
    weight = model.bert.layer[0].ffn.output.weight
    estimate = hessian.estimates[weight].clone()
    assert hessian.tokens == 4 and estimate.abs().sum() > 0
    hessian.before_optimizer_step(state)
    assert torch.allclose(optimizer.state[weight]["hessian"], 0.5 * 4 * estimate**2)
    before = weight.detach().clone()
    optimizer.step()
    assert (weight - before).abs().max() <= 0.01 + 1e-7 and not torch.equal(weight, before)


def test_two_of_four_keeps_the_two_largest_of_every_four():
    weight = torch.tensor([[0.1, -4.0, 3.0, 0.2, 1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, -6.0, 0.3, 0.1, -0.2, 0.4]])
    assert two_of_four_mask(weight).int().tolist() == [[0, 1, 1, 0, 1, 1, 0, 0], [1, 0, 0, 1, 1, 0, 0, 1]]


@pytest.mark.slow
def test_semi_structured_sparsity_prunes_two_of_four_once_and_resumes_exactly(shared_cache, tmp_path, monkeypatch):
    """Its gate asks for a CUDA GPU of compute capability 8.0+, which cannot exist here: stood in for, the
    rest is the real run. Pruned after step 2 (progress 0.25); interrupted before step 3, resumed."""
    monkeypatch.setattr("cramming.train.techniques.sparsity.supports_semi_structured", lambda device: True)
    overrides = ["train.sparsity.method=semi-structured-2:4", "train.sparsity.start=0.25", "train.max_steps=4"]
    straight, resumed = straight_and_resumed(tmp_path, overrides, 3)
    assert_same_training(straight, resumed)
    for name, weight in layer_matrices(straight).items():
        kept_per_group = (weight.reshape(-1, 4) != 0).sum(1)
        assert (kept_per_group == 2).all(), name


class WeightsAtStart(Callback):
    """The model's weights as training starts (after the techniques' own on_train_start)."""

    def on_train_start(self, state):
        self.weights = {name: p.detach().clone() for name, p in state.model.state_dict().items()}


@pytest.mark.slow
def test_a_lottery_ticket_is_the_dense_runs_mask_on_its_rewound_weights_and_resumes_exactly(shared_cache, tmp_path,
                                                                                           plain_run):
    """The plain run (3 steps) kept its checkpoint after step 2; rewound to it, the ticket run starts from
    those weights times the mask of the final weights' largest quarter, and resumes exactly; rewound to
    the initialization, it starts from the weights the same seed builds."""
    kept = plain_run / "checkpoints" / "at-0.3-step-00000002"
    assert kept.is_dir() and not (plain_run / "checkpoints" / "step-00000001").exists()  # kept; others pruned
    masks = {name: magnitude_mask(weight, 0.25) for name, weight in layer_matrices(plain_run).items()}
    ticket = ["train.sparsity.method=lottery", f"train.sparsity.ticket={plain_run}", "train.sparsity.density=0.25",
              "train.max_steps=3"]
    start = WeightsAtStart()
    straight = pretrain(compose_config(STEPS + [f"output_dir={tmp_path / 'a'}", *ticket, "train.sparsity.rewind=0.3"]),
                        callbacks=[start])
    halted = STEPS + [f"output_dir={tmp_path / 'b'}", *ticket, "train.sparsity.rewind=0.3"]
    with pytest.raises(KeyboardInterrupt):
        pretrain(compose_config(halted), callbacks=[InterruptAt(2)])
    assert_same_training(straight, pretrain(compose_config(halted + ["resume=latest"])))
    rewound = load_file(kept / "model.safetensors")
    assert len(masks) == 8
    assert all(torch.equal(start.weights[name], rewound[name] * mask) for name, mask in masks.items())
    assert torch.equal(start.weights["bert.embeddings.word_embeddings.weight"],
                       rewound["bert.embeddings.word_embeddings.weight"])  # rewound too, and dense
    final = torch.load(straight / "checkpoints" / "final" / "trainer_state.pt", weights_only=True)
    assert all(torch.equal(final["callbacks"]["Sparsity"]["masks"][name], mask) for name, mask in masks.items())

    at_init = WeightsAtStart()
    pretrain(compose_config(STEPS + [f"output_dir={tmp_path / 'c'}", *ticket[:-1], "train.max_steps=1"]),
             callbacks=[at_init])
    torch.manual_seed(0)  # the run's train.seed: what the trainer builds the model with
    initial = tiny_model(2, read_config(plain_run / "checkpoints" / "final")[0]["vocab_size"]).state_dict()
    assert all(torch.equal(at_init.weights[name], initial[name] * masks.get(name, 1)) for name in initial)


def test_a_lottery_ticket_is_drawn_from_an_older_run_of_the_same_model_and_not_from_another_model(tmp_path,
                                                                                                  plain_run):
    """The dense run is compared as a model: its config.yaml may predate an arch key (which then holds its
    default), but another architecture is refused."""
    dense = tmp_path / "dense"
    shutil.copytree(plain_run / "checkpoints" / "final", dense / "checkpoints" / "final")
    config = OmegaConf.load(plain_run / "config.yaml")
    del config.arch["classifier_pooling"]  # as a run from before the key was added wrote it
    OmegaConf.save(config, dense / "config.yaml")
    cfg = compose_config(STEPS + [f"output_dir={tmp_path}", "train.sparsity.method=lottery",
                                  f"train.sparsity.ticket={dense}", "train.sparsity.density=0.25"])
    assert lottery_ticket(cfg) == (dense / "checkpoints" / "final", None)
    config.arch.hidden_size *= 2
    OmegaConf.save(config, dense / "config.yaml")
    with pytest.raises(CrammingError, match="that run's arch differs from this one's"):
        lottery_ticket(cfg)


@pytest.mark.slow
def test_ema_trains_as_the_plain_run_resumes_exactly_and_its_final_model_is_the_average(shared_cache, tmp_path,
                                                                                        plain_run):
    """train.ema.decay: training runs on the raw weights (the plain run's losses, unchanged); a run
    interrupted before its last step and resumed equals the straight one; the final checkpoint holds the
    average, which is not the plain run's final weights."""
    straight, resumed = straight_and_resumed(tmp_path, ["train.ema.decay=0.9", "train.max_steps=3"], 3)
    assert_same_training(straight, resumed)
    assert [r["loss"] for r in records(straight)] == [r["loss"] for r in records(plain_run)]
    final = straight / "checkpoints" / "final"
    ema = torch.load(final / "trainer_state.pt", weights_only=True)["callbacks"]["Ema"]
    assert ema["updates"] == 3
    model, _ = load_pretrained(final)
    assert all(torch.equal(p, a) for p, a in zip(model.parameters(), ema["average"], strict=True))
    averaged, plain = (load_file(run / "checkpoints/final/model.safetensors") for run in (straight, plain_run))
    assert not torch.equal(averaged["bert.layer.0.ffn.output.weight"], plain["bert.layer.0.ffn.output.weight"])


def test_ema_averages_with_a_warm_up_of_its_decay():
    """d_n = min(d, (1 + n) / (10 + n)): the first update moves the average nine tenths of the way to the
    weights, the second 1 - 2/11 of the way."""
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    state = bare_state(model)
    ema = Ema(0.99)
    ema.on_train_start(state)
    for value, expected in ((10.0, 9.0), (10.0, 9.0 + 1.0 * (1 - 2 / 11))):
        with torch.no_grad():
            model.weight.fill_(value)
        state.step_finite = torch.tensor(True)
        ema.after_optimizer_step(state)
        assert torch.allclose(ema.average[0], torch.full((1, 2), expected))
    state.step_finite = torch.tensor(False)  # a step the optimizer skipped on the device moves nothing
    ema.after_optimizer_step(state)
    assert torch.allclose(ema.average[0], torch.full((1, 2), 9.0 + 1.0 * (1 - 2 / 11)))
    ema.on_train_end(state, "interrupted")
    assert model.weight[0, 0] == 10.0  # an interrupted run keeps training its raw weights
    ema.on_train_end(state, "max_steps")
    assert torch.allclose(model.weight, torch.full((1, 2), 9.0 + 1.0 * (1 - 2 / 11)))


@pytest.mark.parametrize(("overrides", "words"), [
    (["train.ema.decay=1"], "train.ema.decay=1.0 must be in [0, 1) (0: off)"),
    (["train.ema.decay=0.9", "train.stacking.stages=[1,2]"], "train.ema and train.stacking do not combine"),
    (["train.ema.decay=0.9", "train.sparsity.method=magnitude"], "train.ema and train.sparsity do not combine"),
])
def test_a_bad_ema_setting_is_one_line(tmp_path, cache_dir, overrides, words):
    code, output = run_command("pretrain", "data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", "name=t",
                               "budget=0.001", "arch.num_layers=2", f"output_dir={tmp_path}", *overrides)
    assert code == 2 and "Traceback" not in output
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert words in line
    assert not cache_dir.exists()  # refused before any data was prepared


@pytest.mark.slow
def test_z_loss_adds_the_mean_squared_log_normalizer_and_resumes_exactly(shared_cache, tmp_path, plain_run):
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0]]])  # (B=1, k=2, V=2): log Z = log 2, log 4
    both = (math.log(2) ** 2 + math.log(4) ** 2) / 2
    assert z_penalty(logits, torch.tensor([[1, 0]])).item() == pytest.approx(both)
    assert z_penalty(logits, torch.tensor([[1, -100]])).item() == pytest.approx(math.log(2) ** 2)  # unlabelled
    overrides = ["train.z_loss.weight=1e-4", "train.max_steps=3"]
    straight, resumed = straight_and_resumed(tmp_path, overrides, 3)
    assert_same_training(straight, resumed)
    penalized, plain = records(straight)[0]["loss"], records(plain_run)[0]["loss"]  # the same first batch and weights
    assert penalized > plain and penalized - plain < 1e-4 * 20**2  # log Z of a fresh model: about log(vocab) < 20



def test_the_unigram_bias_starts_at_the_datas_log_frequencies_and_resumes_exactly(shared_cache, tmp_path, plain_run):
    """The bias at step 0 is the centred, add-one smoothed log frequency of the prepared rows' tokens, the special
    tokens lowest; the first loss is far below the plain run's (the same batch), and a resume continues exactly."""
    counts = np.array([50, 9, 9, 40, 9, 3, 0, 1], dtype=np.int64)  # ids 0-4 special
    bias = log_unigram(counts)
    assert bias.mean().item() == pytest.approx(0, abs=1e-6)
    assert bias[5] - bias[7] == pytest.approx(math.log(4 / 2)) and (bias[:5] == bias.min()).all()
    overrides = ["train.unigram_bias=true", "train.max_steps=3"]  # one override: the decoder gets its bias
    straight, resumed = straight_and_resumed(tmp_path, overrides, 3)
    assert_same_training(straight, resumed)
    assert read_config(straight / "checkpoints" / "final")[1].decoder_bias is True
    assert records(straight)[0]["loss"] < records(plain_run)[0]["loss"] - 1.5  # 4096 tokens: log 4096 = 8.3 at start
    code, output = run_command("pretrain", *STEPS, "train.unigram_bias=true", "arch.decoder_bias=false",
                               f"output_dir={tmp_path / 'c'}")
    assert code == 2 and "Traceback" not in output
    assert output.strip().splitlines()[-1] == ("error: train.unigram_bias=true sets the MLM decoder's bias, which "
                                               "arch.decoder_bias=false leaves out: drop arch.decoder_bias=false")


def test_a_mask_schedule_steps_through_its_rates_and_of_one_rate_is_the_plain_run(shared_cache, tmp_path, plain_run):
    assert [rate_at([0.3, 0.2, 0.1], f) for f in (0, 0.33, 0.34, 0.67, 1.0)] == [0.3, 0.3, 0.2, 0.1, 0.1]
    same = pretrain(compose_config(STEPS + ["train.max_steps=3", f"output_dir={tmp_path / 'same'}",
                                            "train.mask_schedule=[0.25]"]))
    assert_same_training(plain_run, same)  # the stream's rows and seeds: the default masks exactly
    dataset, _ = prepare_dataset(compose_config(STEPS).data, str(shared_cache))
    technique = MaskSchedule([0.4, 0.1])
    stream = technique.stream(Microbatches(dataset, 4, 0, 1, 0.25, seed=0), start=0)
    counts = []
    for fraction in (0.0, 0.49, 0.5, 0.99):
        technique.fraction = fraction
        counts.append(next(stream)["masked_positions"].shape[1])
    seq_length = dataset.seq_length
    assert counts == [round(0.4 * seq_length)] * 2 + [round(0.1 * seq_length)] * 2
    straight, resumed = straight_and_resumed(tmp_path, ["train.mask_schedule=[0.4,0.1]", "train.max_steps=4"], 3)
    assert_same_training(straight, resumed)


def test_a_clip_that_follows_the_lr_is_the_peak_clip_times_the_lr_multiplier(shared_cache, tmp_path):
    assert clip_threshold("lr", 0.5, 0.25) == 0.125 and clip_threshold("constant", 0.5, 0.25) == 0.5
    assert clip_threshold("lr", None, 0.25) is None
    straight, resumed = straight_and_resumed(tmp_path, ["train.optim.clip_schedule=lr", "train.max_steps=3"], 3)
    assert_same_training(straight, resumed)
    code, output = run_command("pretrain", *STEPS, "train.optim.clip_schedule=lr", "train.optim.grad_clip=null",
                               f"output_dir={tmp_path / 'c'}")
    assert code == 2 and output.strip().splitlines()[-1] == (
        "error: train.optim.clip_schedule=lr scales train.optim.grad_clip, which is null")
