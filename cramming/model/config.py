"""The Hydra group `arch`: ModelConfig (defined with the model) as its typed schema, read from a config or a
checkpoint (keys added to the model later get the values older checkpoints were trained with), and its checks.

Every key is used and any other key is rejected; a value that cannot build a model is a one-line error.
"""

import dataclasses
import math
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ..errors import CrammingError
from .crammed_bert import ModelConfig
from .layers import has_local_layers

ConfigStore.instance().store(group="arch", name="schema", node=ModelConfig)

_CHOICES = {
    "ffn": ("glu", "gelu"),
    "norm_scheme": ("pre", "post", "none"),
    "positions": ("scaled-sinusoidal", "learned", "rope"),
    "init_scheme": ("normal", "scaled", "small", "rezero", "skipinit", "tfixup", "deepnorm"),
    "classifier_head": ("pooler", "transform"),
    "classifier_pooling": ("cls", "mean"),
}
# The norm_scheme an init_scheme is made for, and why (see layers.Layer)
_NORM_SCHEME_OF = {
    "rezero": ("none", "trains without LayerNorms"),
    "tfixup": ("none", "trains without LayerNorms"),
    "deepnorm": ("post", "up-weights the residual of post-LN layers"),
}
# The keys every checkpoint has held since the first were written. Any other key was added since: an older
# checkpoint lacks it and loads with its default, which must compute what the model did before the key existed.
_FIRST_KEYS = ("name", "num_layers", "hidden_size", "num_heads", "intermediate_size", "ffn", "norm_scheme",
               "final_norm", "bias", "positions", "max_position_embeddings", "head_transform", "sparse_prediction",
               "norm_eps", "init_scheme", "init_std", "dropout")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
_ADDED_LATER = tuple(key for key in _DEFAULTS if key not in _FIRST_KEYS)


# A key that acts only with another setting, and that setting: another value than its default without it
# would be silently ignored, so it is refused (at its default it is inert, so ablations change one key).
_ACTS_ONLY_WITH = {
    "global_rope_theta": (lambda cfg: cfg.positions == "rope", "arch.positions=rope"),
    "local_rope_theta": (lambda cfg: cfg.positions == "rope" and has_local_layers(cfg),
                         "arch.positions=rope and sliding-window layers (arch.global_attn_every_n_layers > 1)"),
    "local_attention": (has_local_layers, "sliding-window layers (arch.global_attn_every_n_layers > 1)"),
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
        missing = sorted(set(_FIRST_KEYS) - set(cfg))
        if missing:
            raise CrammingError(f"missing arch key(s): {', '.join(missing)}")
        cfg = ModelConfig(**{**{key: _DEFAULTS[key] for key in _ADDED_LATER}, **cfg})
    if not isinstance(cfg, ModelConfig):
        raise CrammingError(f"expected an arch config, got {type(cfg).__name__}")
    check_model_config(cfg)
    return cfg


RECIPE_INIT_STD = 0.02  # N(0, 0.02), every architecture's default
MAX_INIT_STD = 10 * RECIPE_INIT_STD


def check_model_config(cfg: ModelConfig) -> None:
    """Reject values that cannot build a model, with a one-line reason."""
    for key in ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings",
                "global_attn_every_n_layers", "local_attention"):
        value = getattr(cfg, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CrammingError(f"arch.{key} must be a positive integer, got {value!r}")
    for key, allowed in _CHOICES.items():
        if getattr(cfg, key) not in allowed:
            raise CrammingError(f"arch.{key} must be one of {', '.join(allowed)}, got {getattr(cfg, key)!r}")
    if cfg.init_scheme in _NORM_SCHEME_OF and cfg.norm_scheme != _NORM_SCHEME_OF[cfg.init_scheme][0]:
        norm_scheme, why = _NORM_SCHEME_OF[cfg.init_scheme]
        raise CrammingError(f"arch.init_scheme={cfg.init_scheme} {why}: set arch.norm_scheme={norm_scheme}")
    if not cfg.first_layer_attention_norm and cfg.norm_scheme != "pre":
        raise CrammingError("arch.first_layer_attention_norm=false is for pre-LN layers (the first then reads "
                            "the normed embeddings): set arch.norm_scheme=pre")
    if cfg.hidden_size % cfg.num_heads:
        raise CrammingError(
            f"arch.hidden_size ({cfg.hidden_size}) must be divisible by arch.num_heads ({cfg.num_heads})"
        )
    if cfg.ffn == "glu" and cfg.intermediate_size % 2:
        raise CrammingError(f"arch.intermediate_size ({cfg.intermediate_size}) must be even with ffn=glu")
    if cfg.positions == "scaled-sinusoidal" and cfg.hidden_size % 2:
        raise CrammingError(f"arch.hidden_size ({cfg.hidden_size}) must be even with sinusoidal positions")
    if cfg.positions == "rope" and (cfg.hidden_size // cfg.num_heads) % 2:
        raise CrammingError(f"arch.positions=rope rotates pairs of a head's dimensions: the head size "
                            f"({cfg.hidden_size // cfg.num_heads}) must be even")
    if cfg.local_attention % 2:
        raise CrammingError(f"arch.local_attention ({cfg.local_attention}) must be even: half of the window "
                            "lies on each side of the query")
    for key in ("global_rope_theta", "local_rope_theta"):
        if not (math.isfinite(getattr(cfg, key)) and getattr(cfg, key) > 1.0):
            raise CrammingError(f"arch.{key} must be a finite number greater than 1, got {getattr(cfg, key)}")
    for key, (acts, setting) in _ACTS_ONLY_WITH.items():
        if getattr(cfg, key) != _DEFAULTS[key] and not acts(cfg):
            raise CrammingError(f"arch.{key}={getattr(cfg, key)} has no effect without {setting}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise CrammingError(f"arch.dropout must be in [0, 1), got {cfg.dropout}")
    if not 0.0 < cfg.init_std <= MAX_INIT_STD:
        far = (f" ({cfg.init_std / RECIPE_INIT_STD:g}x the recipe's {RECIPE_INIT_STD}: the first logits are so large "
               f"that the loss starts near the tens and stays there)" if cfg.init_std > MAX_INIT_STD else "")
        raise CrammingError(f"arch.init_std must be positive and at most {MAX_INIT_STD}, got {cfg.init_std}{far}")
    if not cfg.norm_eps > 0.0:
        raise CrammingError(f"arch.norm_eps must be positive, got {cfg.norm_eps}")
