"""The Hydra group `arch`: ModelConfig (defined with the model) as its typed schema, read from a config or a
checkpoint (keys added to the model later get the values older checkpoints were trained with), and its checks.

Every key is used and any other key is rejected; a value that cannot build a model is a one-line error.
"""

import dataclasses
import math
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ..errors import CrammingError, require
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


MAX_LAYERS = 1000  # far deeper than any BERT-class encoder: more would take minutes to build before any check
RECIPE_INIT_STD = 0.02  # N(0, 0.02), every architecture's default
MAX_INIT_STD = 10 * RECIPE_INIT_STD


def check_model_config(cfg: ModelConfig) -> None:
    """Reject values that cannot build a model: every problem, one line each (the rules that combine keys once the
    sizes and choices they read are in their domains)."""
    integers = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings",
                "global_attn_every_n_layers", "local_attention")
    domains = [
        *[(isinstance(getattr(cfg, key), int) and not isinstance(getattr(cfg, key), bool) and getattr(cfg, key) >= 1,
           f"arch.{key} must be a positive integer, got {getattr(cfg, key)!r}") for key in integers],
        *[(getattr(cfg, key) in allowed, f"arch.{key} must be one of {', '.join(allowed)}, got {getattr(cfg, key)!r}")
          for key, allowed in _CHOICES.items()],
    ]
    far = (f" ({cfg.init_std / RECIPE_INIT_STD:g}x the recipe's {RECIPE_INIT_STD}: the first logits are so large "
           "that the loss starts near the tens and stays there)" if cfg.init_std > MAX_INIT_STD else "")
    values = [
        *[(math.isfinite(getattr(cfg, key)) and getattr(cfg, key) > 1.0,
           f"arch.{key} must be a finite number greater than 1, got {getattr(cfg, key)}")
          for key in ("global_rope_theta", "local_rope_theta")],
        (0.0 <= cfg.dropout < 1.0, f"arch.dropout must be in [0, 1), got {cfg.dropout}"),
        (0.0 < cfg.init_std <= MAX_INIT_STD,
         f"arch.init_std must be positive and at most {MAX_INIT_STD}, got {cfg.init_std}{far}"),
        (cfg.norm_eps > 0.0, f"arch.norm_eps must be positive, got {cfg.norm_eps}"),
        (not isinstance(cfg.num_layers, int) or cfg.num_layers <= MAX_LAYERS,
         f"arch.num_layers must be at most {MAX_LAYERS}, got {cfg.num_layers}"),
    ]
    require([*domains, *values, *(_combined_rules(cfg) if all(ok for ok, _ in domains) else [])])


def _combined_rules(cfg: ModelConfig) -> list[tuple[bool, str]]:
    """The rules between keys, as `require` takes them."""
    norm_scheme, why = _NORM_SCHEME_OF.get(cfg.init_scheme, (cfg.norm_scheme, ""))
    head_size = cfg.hidden_size // cfg.num_heads
    return [
        (cfg.norm_scheme == norm_scheme,
         f"arch.init_scheme={cfg.init_scheme} {why}: set arch.norm_scheme={norm_scheme}"),
        (cfg.first_layer_attention_norm or cfg.norm_scheme == "pre",
         "arch.first_layer_attention_norm=false is for pre-LN layers (the first then reads the normed embeddings): "
         "set arch.norm_scheme=pre"),
        (cfg.hidden_size % cfg.num_heads == 0,
         f"arch.hidden_size ({cfg.hidden_size}) must be divisible by arch.num_heads ({cfg.num_heads})"),
        (cfg.ffn != "glu" or cfg.intermediate_size % 2 == 0,
         f"arch.intermediate_size ({cfg.intermediate_size}) must be even with ffn=glu"),
        (cfg.positions != "scaled-sinusoidal" or cfg.hidden_size % 2 == 0,
         f"arch.hidden_size ({cfg.hidden_size}) must be even with sinusoidal positions"),
        (cfg.positions != "rope" or head_size % 2 == 0,
         f"arch.positions=rope rotates pairs of a head's dimensions: the head size ({head_size}) must be even"),
        (cfg.local_attention % 2 == 0,
         f"arch.local_attention ({cfg.local_attention}) must be even: half of the window lies on each side of the "
         "query"),
        *[(getattr(cfg, key) == _DEFAULTS[key] or acts(cfg),
           f"arch.{key}={getattr(cfg, key)} has no effect without {setting}")
          for key, (acts, setting) in _ACTS_ONLY_WITH.items()],
    ]
