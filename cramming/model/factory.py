"""Build freshly initialized models from an arch config."""

import math

from torch import nn

from ..errors import CrammingError
from .config import as_model_config
from .modeling import CrammedForMaskedLM, CrammedForSequenceClassification


def build_mlm_model(cfg, vocab_size: int) -> CrammedForMaskedLM:
    """The masked-language model for pretraining; `cfg` is a ModelConfig or the `arch` DictConfig."""
    cfg = as_model_config(cfg)
    _check_size("vocab_size", vocab_size)
    model = CrammedForMaskedLM(cfg, vocab_size)
    init_weights(model, cfg)
    return model


def build_classifier(cfg, vocab_size: int, num_labels: int) -> CrammedForSequenceClassification:
    """A sequence classifier (regression when num_labels == 1), all weights fresh."""
    cfg = as_model_config(cfg)
    _check_size("vocab_size", vocab_size)
    _check_size("num_labels", num_labels)
    model = CrammedForSequenceClassification(cfg, vocab_size, num_labels)
    init_weights(model, cfg)
    return model


def init_weights(model: nn.Module, cfg) -> None:
    """N(0, init_std) for every Linear and Embedding weight, zero Linear biases (LayerNorms keep 1 and 0).

    init_scheme=scaled divides the std of each residual branch's output projection by sqrt(2 * num_layers),
    as in GPT-2, so the residual stream does not grow with depth.
    """
    residual_std = cfg.init_std
    if cfg.init_scheme == "scaled":
        residual_std /= math.sqrt(2 * cfg.num_layers)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            is_residual_output = name.endswith(("attention.dense", "ffn.output"))
            nn.init.normal_(module.weight, mean=0.0, std=residual_std if is_residual_output else cfg.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


def _check_size(key: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CrammingError(f"{key} must be a positive integer, got {value!r}")
