"""Typed schema of the Hydra group `arch`: every key here is used, any other key is rejected.

The architecture is described by its components (norm placement, FFN kind, positions, head) rather than
by a single "kind" switch, so each design choice of the crammed recipe can be ablated on its own.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from ..errors import CrammingError


@dataclass
class ModelConfig:
    name: str = MISSING  # label of this architecture, e.g. crammed-bert
    num_layers: int = 16
    hidden_size: int = 768
    num_heads: int = 12
    intermediate_size: int = 3072  # with ffn=glu: split into gate and value halves of intermediate_size / 2
    ffn: str = "glu"  # glu: GELU(gate) * value | gelu: GELU(x), as in BERT
    norm_scheme: str = "pre"  # pre: x + f(LN x) | post: LN(x + f(x)), as in BERT
    final_norm: bool = True  # LayerNorm after the last layer
    bias: bool = False  # biases in every Linear of the encoder and MLM head (decoder bias included)
    positions: str = "scaled-sinusoidal"  # scaled-sinusoidal: fixed sinusoids x one learned scalar | learned
    max_position_embeddings: int = 128  # longest input; also the size of a learned position table
    head_transform: bool = False  # BERT's dense + GELU + LayerNorm before the MLM decoder
    sparse_prediction: bool = True  # run the decoder and loss on the masked positions only
    norm_eps: float = 1e-12
    init_scheme: str = "normal"  # normal: N(0, init_std) | scaled: residual output projections / sqrt(2L)
    init_std: float = 0.02
    dropout: float = 0.0  # embeddings, attention probs, residual branches, classifier; 0 in pretraining


ConfigStore.instance().store(group="arch", name="schema", node=ModelConfig)

_CHOICES = {
    "ffn": ("glu", "gelu"),
    "norm_scheme": ("pre", "post"),
    "positions": ("scaled-sinusoidal", "learned"),
    "init_scheme": ("normal", "scaled"),
}


def as_model_config(cfg: Any) -> ModelConfig:
    """A checked ModelConfig from a ModelConfig, an `arch` DictConfig or a mapping (e.g. from config.json)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(cfg, Mapping):
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise CrammingError(f"unknown arch key(s): {', '.join(unknown)}")
        missing = sorted(known - set(cfg))
        if missing:
            raise CrammingError(f"missing arch key(s): {', '.join(missing)}")
        cfg = ModelConfig(**cfg)
    if not isinstance(cfg, ModelConfig):
        raise CrammingError(f"expected an arch config, got {type(cfg).__name__}")
    check_model_config(cfg)
    return cfg


def check_model_config(cfg: ModelConfig) -> None:
    """Reject values that cannot build a model, with a one-line reason."""
    for key in ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings"):
        value = getattr(cfg, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CrammingError(f"arch.{key} must be a positive integer, got {value!r}")
    for key, allowed in _CHOICES.items():
        if getattr(cfg, key) not in allowed:
            raise CrammingError(f"arch.{key} must be one of {', '.join(allowed)}, got {getattr(cfg, key)!r}")
    if cfg.hidden_size % cfg.num_heads:
        raise CrammingError(
            f"arch.hidden_size ({cfg.hidden_size}) must be divisible by arch.num_heads ({cfg.num_heads})"
        )
    if cfg.ffn == "glu" and cfg.intermediate_size % 2:
        raise CrammingError(f"arch.intermediate_size ({cfg.intermediate_size}) must be even with ffn=glu")
    if cfg.positions == "scaled-sinusoidal" and cfg.hidden_size % 2:
        raise CrammingError(f"arch.hidden_size ({cfg.hidden_size}) must be even with sinusoidal positions")
    if not 0.0 <= cfg.dropout < 1.0:
        raise CrammingError(f"arch.dropout must be in [0, 1), got {cfg.dropout}")
    if not cfg.init_std > 0.0:
        raise CrammingError(f"arch.init_std must be positive, got {cfg.init_std}")
    if not cfg.norm_eps > 0.0:
        raise CrammingError(f"arch.norm_eps must be positive, got {cfg.norm_eps}")
