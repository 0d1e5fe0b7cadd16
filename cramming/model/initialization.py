"""Initialization of Crammed BERT, one module at a time, for every init_scheme of ModelConfig.

Imports only torch: part of the export's remote code, where transformers calls init_module as
`_init_weights`, so an exported model draws the same weights as the one that trained.
"""

import math

import torch
from torch import nn

from .crammed_bert import MaskedLMHead
from .layers import BranchLinear, Embeddings, Layer, ResidualOutput


SMALL_INIT = 1e-4  # init_scheme=small: embeddings from U(-1e-4, 1e-4)


@torch.no_grad()
def init_module(module: nn.Module, cfg) -> None:
    """Initialize one module's own parameters (N = num_layers): zero biases, unit norms, zero residual gates
    (rezero, skipinit), the position scale at 1/sqrt(hidden_size) (the embeddings' scale), and Linear and
    Embedding weights N(0, init_std) (heads always), except:

    scaled: attention and FFN output projections N(0, init_std / sqrt(2N)), as GPT-2.
    small: embeddings (tokens, learned positions) U(-1e-4, 1e-4), the position scale 1e-4: the embedding
        LayerNorm brings them to unit scale, and their direction moves fast from so close to 0 (BlinkDL's
        SmallInitEmb, used in RWKV).
    tfixup (Huang et al. 2020), its encoder rule: branch matrices xavier-uniform, the value, attention output
        and FFN matrices times 0.67·N^-1/4; embeddings N(0, hidden_size^-1/2). (Its (9N)^-1/4 on the input
        embeddings comes with a decoder; here the embedding LayerNorm would undo it.)
    deepnorm (Wang et al. 2022): branch matrices xavier-normal, the value, attention output and FFN matrices
        with gain β = (8N)^-1/4, its encoder-only value (α: see Layer).
    A fused matrix (qkv; GLU's gate and value) is initialized as its separate matrices (see BranchLinear).

    `init_weights` applies it bottom-up; transformers applies it (as `_init_weights`) in the same order to
    an exported model, so both draw the same weights from the same seed.
    """
    scheme, N = cfg.init_scheme, cfg.num_layers
    if isinstance(module, BranchLinear) and scheme in ("tfixup", "deepnorm"):
        for weight, on_value_path in zip(module.weight.chunk(len(module.value_path)), module.value_path):
            if scheme == "tfixup":
                nn.init.xavier_uniform_(weight, gain=0.67 * N**-0.25 if on_value_path else 1.0)
            else:
                nn.init.xavier_normal_(weight, gain=(8 * N) ** -0.25 if on_value_path else 1.0)
    elif isinstance(module, nn.Embedding) and scheme == "small":
        nn.init.uniform_(module.weight, -SMALL_INIT, SMALL_INIT)
    elif isinstance(module, nn.Embedding) and scheme == "tfixup":
        nn.init.normal_(module.weight, mean=0.0, std=cfg.hidden_size**-0.5)
    elif isinstance(module, (nn.Linear, nn.Embedding)):
        scaled = isinstance(module, ResidualOutput) and scheme == "scaled"
        nn.init.normal_(module.weight, mean=0.0, std=cfg.init_std / (math.sqrt(2 * N) if scaled else 1))
    if isinstance(module, (nn.Linear, nn.LayerNorm, MaskedLMHead)) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
    if isinstance(module, Embeddings) and module.position_scale is not None:
        nn.init.constant_(module.position_scale, SMALL_INIT if scheme == "small" else cfg.hidden_size**-0.5)
    if isinstance(module, Layer) and module.residual_gate is not None:
        nn.init.zeros_(module.residual_gate)


def init_weights(model: nn.Module, cfg) -> None:
    """Initialize every module, children before parents (the order of nn.Module.apply and transformers)."""
    model.apply(lambda module: init_module(module, cfg))
