"""The crammed BERT model (crammed_bert.py from the top; layers.py, unpadded.py, initialization.py), its arch
config, builders and FLOPs.

Checkpoint directories: cramming.model.checkpoint; export to transformers: cramming.model.export (the only
part that imports transformers, so commands that do not export do not pay for importing it).
"""

from .config import ModelConfig
from .crammed_bert import training_flops_per_token
from .factory import build_classifier, build_mlm_model

__all__ = ["ModelConfig", "build_classifier", "build_mlm_model", "training_flops_per_token"]
