"""The Hydra group `arch`: ModelConfig (defined with the model) as its typed schema, and its checks.

Every key is used and any other key is rejected; a value that cannot build a model is a one-line error.
"""

import dataclasses
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ..errors import CrammingError
from .crammed_bert import ModelConfig


ConfigStore.instance().store(group="arch", name="schema", node=ModelConfig)

_CHOICES = {
    "ffn": ("glu", "gelu"),
    "norm_scheme": ("pre", "post", "none"),
    "positions": ("scaled-sinusoidal", "learned"),
    "init_scheme": ("normal", "scaled", "small", "rezero", "skipinit", "tfixup", "deepnorm"),
}
# The norm_scheme an init_scheme is made for, and why (see layers.Layer)
_NORM_SCHEME_OF = {
    "rezero": ("none", "trains without LayerNorms"),
    "tfixup": ("none", "trains without LayerNorms"),
    "deepnorm": ("post", "up-weights the residual of post-LN layers"),
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
    if cfg.init_scheme in _NORM_SCHEME_OF and cfg.norm_scheme != _NORM_SCHEME_OF[cfg.init_scheme][0]:
        norm_scheme, why = _NORM_SCHEME_OF[cfg.init_scheme]
        raise CrammingError(f"arch.init_scheme={cfg.init_scheme} {why}: set arch.norm_scheme={norm_scheme}")
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
