"""The crammed BERT model: arch config, encoder and heads, checkpoints, export to `transformers`, FLOPs."""

from .checkpoint import build_classifier_from_pretrained, load_pretrained, save_pretrained
from .config import ModelConfig
from .export import export_to_transformers
from .factory import build_classifier, build_mlm_model
from .flops import training_flops_per_token

__all__ = [
    "ModelConfig",
    "build_classifier",
    "build_classifier_from_pretrained",
    "build_mlm_model",
    "export_to_transformers",
    "load_pretrained",
    "save_pretrained",
    "training_flops_per_token",
]
