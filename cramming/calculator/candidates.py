"""Candidate encoder shapes and what each does within the budget (tokens/s, tokens, FLOPs, loss), ranked."""

from dataclasses import dataclass, replace
from typing import Optional

from cramming.model import ModelConfig, training_flops_per_token

from .loss_model import Frontier, SizeRule, excess_loss, predicted_loss
from .speed_model import SpeedModel, non_embedding_parameters


@dataclass
class Candidate:
    layers: int
    hidden: int
    heads: int
    ffn: int  # intermediate_size (GLU: two halves)
    parameters: int  # non-embedding
    tokens_per_s: float
    tokens: float  # within the budget
    flops: float  # total training FLOPs: tokens x the model's training FLOPs per token
    optimal_parameters: float  # the size rule's N_opt at this compute: where the loss index is least at it
    loss_index: float  # loss above the irreducible part, relative to the anchor's (loss_model.excess_loss)
    loss: Optional[float]  # predicted final MLM loss; None without a loss fit
    recommended: bool = False


def shapes(base: ModelConfig, depths: list[int], widths: list[int], head_size: int, ffn_ratio: int):
    """The recipe's layout at each depth and width: heads of `head_size`, FFN `ffn_ratio` x width."""
    for depth in depths:
        for width in widths:
            yield replace(base, num_layers=depth, hidden_size=width, num_heads=max(1, width // head_size),
                          intermediate_size=ffn_ratio * width)


def evaluate(arch: ModelConfig, speed: SpeedModel, seconds: float, batch: int, vocab_size: int,
             seq_length: int, mlm_rate: float, rule: SizeRule, frontier: Optional[Frontier],
             default_alpha: float) -> Candidate:
    """One shape over `seconds` of training on `batch`-sequence microbatches. Without a frontier the
    loss index uses `default_alpha` as the frontier's exponent."""
    tokens_per_s = speed.tokens_per_second(arch, batch, vocab_size, seq_length, mlm_rate)
    tokens = tokens_per_s * seconds
    flops = tokens * training_flops_per_token(arch, vocab_size, seq_length, mlm_rate)
    parameters = non_embedding_parameters(arch)
    alpha = frontier.alpha if frontier else default_alpha
    index = float(excess_loss(rule, alpha, parameters, flops))
    loss = float(predicted_loss(frontier, rule, parameters, flops)) if frontier else None
    return Candidate(arch.num_layers, arch.hidden_size, arch.num_heads, arch.intermediate_size, parameters,
                     tokens_per_s, tokens, flops, float(rule.optimal_parameters(flops)), index, loss)


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Best first by loss index, which orders shapes as the predicted loss does (loss = c + scale · index);
    the first is marked recommended."""
    ranked = sorted(candidates, key=lambda c: c.loss_index)
    for i, candidate in enumerate(ranked):
        candidate.recommended = i == 0
    return ranked
