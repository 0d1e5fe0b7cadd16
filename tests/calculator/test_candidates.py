"""Candidate shapes and their ranking."""

from dataclasses import replace

import pytest

from cramming.calculator.candidates import Candidate, evaluate, rank, shapes
from cramming.calculator.loss_model import Frontier, SizeRule
from cramming.calculator.speed_model import V100_REFERENCE, SpeedModel
from cramming.model import ModelConfig, training_flops_per_token

BASE = ModelConfig(name="candidate")


def candidate(index, loss=None):
    return Candidate(layers=2, hidden=128, heads=2, ffn=512, parameters=1, tokens_per_s=1.0, tokens=1.0,
                     flops=1.0, optimal_parameters=1.0, loss_index=index, loss=loss)


def test_rank_puts_the_lowest_loss_first_and_marks_it():
    ranked = rank([candidate(1.2), candidate(1.05), candidate(1.3)])
    assert [c.loss_index for c in ranked] == [1.05, 1.2, 1.3]
    assert [c.recommended for c in ranked] == [True, False, False]


def test_shapes_follow_the_recipe_layout():
    archs = list(shapes(BASE, [2, 4], [128, 768], head_size=64, ffn_ratio=4))
    assert [(a.num_layers, a.hidden_size, a.num_heads, a.intermediate_size) for a in archs] == [
        (2, 128, 2, 512), (2, 768, 12, 3072), (4, 128, 2, 512), (4, 768, 12, 3072)]
    assert all(a.ffn == "glu" and a.norm_scheme == "pre" for a in archs)


def test_ranking_with_a_frontier_orders_by_predicted_loss():
    speed = SpeedModel("v100", V100_REFERENCE, "reference")
    arch = replace(BASE, num_layers=16, hidden_size=768)
    tokens = speed.tokens_per_second(arch, 128, 32768, 128, 0.25) * 86400
    # crammed-bert optimal for this day, its compute in training FLOPs as the calculator's anchor counts it
    rule = SizeRule(params=94371840, compute=tokens * training_flops_per_token(arch, 32768, 128, 0.25))
    frontier = Frontier(a=1.0, alpha=0.1, c=1.5, c0=1e18)
    evaluated = [evaluate(a, speed, 86400, 128, 32768, 128, 0.25, rule, frontier, 0.05)
                 for a in shapes(BASE, [2, 8, 16, 24], [128, 384, 768, 1024], 64, 4)]
    ranked = rank(evaluated)
    losses = [c.loss for c in ranked]
    assert losses == sorted(losses)
    assert ranked[0].recommended and 1.5 < losses[0] < losses[-1]
    crammed = next(c for c in evaluated if (c.layers, c.hidden) == (16, 768))
    assert crammed.loss_index == pytest.approx(1.0, abs=1e-9)  # the anchor is on the frontier, exactly
    assert crammed.optimal_parameters == pytest.approx(crammed.parameters)
