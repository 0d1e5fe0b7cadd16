"""Build freshly initialized models from an arch config (checked first)."""

from ..errors import CrammingError
from .config import as_model_config
from .crammed_bert import CrammedForMaskedLM, CrammedForSequenceClassification
from .initialization import init_weights


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


def _check_size(key: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CrammingError(f"{key} must be a positive integer, got {value!r}")
