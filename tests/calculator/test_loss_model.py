"""The loss-against-compute fit, the loss of shapes off the frontier, and reading runs."""

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from cramming.calculator.loss_model import (Frontier, SizeRule, excess_loss, expand_runs, fit_frontier,
                                            leave_one_out, optimal_excess, predicted_loss, read_run)
from cramming.errors import CrammingError
from cramming.model import ModelConfig, training_flops_per_token
from cramming.calculator.speed_model import non_embedding_parameters

TRUE = Frontier(a=2.0, alpha=0.3, c=1.5, c0=1e15)


def test_fit_recovers_a_known_frontier():
    compute = np.geomspace(1e13, 1e17, 7)
    fitted = fit_frontier(compute, TRUE.loss(compute))
    assert fitted.loss(3e18) == pytest.approx(float(TRUE.loss(3e18)), abs=1e-3)  # extrapolates 30x out
    assert (fitted.alpha, fitted.c) == pytest.approx((TRUE.alpha, TRUE.c), rel=1e-3)


def test_leave_one_out_predicts_held_out_runs():
    compute = np.geomspace(1e13, 1e16, 6)
    noise = np.random.default_rng(1).normal(0, 0.03, compute.size)
    runs = [type("Run", (), {"name": f"r{i}", "compute": c, "final_loss": loss})
            for i, (c, loss) in enumerate(zip(compute, TRUE.loss(compute) + noise))]
    errors = [predicted - actual for _, actual, predicted in leave_one_out(runs)]
    assert len(errors) == 6 and max(abs(e) for e in errors[1:-1]) < 0.2  # interpolation


def test_fit_needs_three_runs():
    with pytest.raises(CrammingError, match="at least 3 runs"):
        fit_frontier([1e12, 1e13], [7.0, 6.0])


def test_compute_optimal_shapes_land_on_the_frontier_and_others_above():
    """The size rule's N_opt(C) is where the loss is least at C, in the one unit of compute both use: the
    calculator's column (N_opt) and its ranking (the loss) cannot disagree at a given compute."""
    rule = SizeRule(params=1e8, compute=1e19)
    for compute in (1e17, 1e19, 1e21):
        n = float(rule.optimal_parameters(compute))
        on = predicted_loss(TRUE, rule, n, compute)
        assert float(on) == pytest.approx(float(TRUE.loss(compute)), rel=1e-9)
        assert float(excess_loss(rule, TRUE.alpha, n, compute)) == pytest.approx(
            float(optimal_excess(rule, TRUE.alpha, compute)), rel=1e-12)
        for factor in (0.8, 0.25, 1.25, 4.0):  # same compute, the wrong size
            assert predicted_loss(TRUE, rule, n * factor, compute) > on


def test_size_rule_matches_the_reference_numbers():
    rule = SizeRule(params=1e8, compute=1e19)
    growth = rule.optimal_parameters(1e20) / rule.optimal_parameters(1e19)
    assert growth == pytest.approx(7.41, abs=0.01)  # 10x compute -> 7.4x size
    assert 10 / growth == pytest.approx(1.35, abs=0.01)  # ... and 1.35x steps


def write_run(directory, arch: ModelConfig, losses, tokens_per_record=1000, vocab_size=4096):
    directory.mkdir(parents=True)
    config = {"arch": OmegaConf.structured(arch), "train": {"mlm_rate": 0.25},
              "data": {"tokenizer": {"vocab_size": vocab_size}, "seq_length": 128}}
    OmegaConf.save(OmegaConf.create(config), directory / "config.yaml")
    records = [{"step": i + 1, "tokens": (i + 1) * tokens_per_record, "loss": loss}
               for i, loss in enumerate(losses)]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_read_run_computes_flops_from_its_config(tmp_path):
    arch = ModelConfig(name="tiny", num_layers=2, hidden_size=128, num_heads=4, intermediate_size=512)
    write_run(tmp_path / "small" / "2026-01-01_00-00-00", arch, [8.0, 7.0, 6.5])
    [path] = expand_runs(str(tmp_path / "*" / "*"))  # a run directory stands for its metrics.jsonl
    run = read_run(path)
    assert run.name == "small" and run.final_loss == 6.5
    assert run.compute == pytest.approx(3000 * training_flops_per_token(arch, 4096, 128, 0.25))
    assert run.parameters == non_embedding_parameters(arch) and len(run.curve) == 3


def test_bad_runs_are_one_line_errors(tmp_path):
    with pytest.raises(CrammingError, match="matched no metrics.jsonl"):
        expand_runs(str(tmp_path / "nothing*"))
    (tmp_path / "lonely").mkdir()
    (tmp_path / "lonely" / "metrics.jsonl").write_text("")
    with pytest.raises(CrammingError, match="config.yaml"):
        read_run(tmp_path / "lonely" / "metrics.jsonl")
    assert expand_runs(None) == []
