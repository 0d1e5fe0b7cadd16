"""Post-training int8 quantization of an export: `python scripts/export.py ... quantize=int8`.

torchao's dynamic int8 quantization through transformers' TorchAoConfig: every nn.Linear's weight stored in
int8 with one scale per output row, activations quantized per token at run time, int8 matmuls (on a CPU
too). Embeddings, LayerNorms and the tied decoder (F.linear on the embedding matrix, not a Linear) stay
fp32. The copy is a transformers folder like the export (same config, tokenizer and remote code, plus
its `quantization_config`); it loads with `from_pretrained(..., trust_remote_code=True)` where torchao is
installed. It is for inference: fine-tuning int8 weights is not what it is for, so quantize the fine-tuned
classifier (eval.save_models=true keeps them) and score it with `quantize_eval_task`
(cramming.eval.run.glue_dev_scores).
"""

import json
import os
from pathlib import Path

from ..errors import CrammingError
from ..files import share_weights

QUANTIZATIONS = ("int8",)
WEIGHTS = "model.safetensors"


def is_transformers_export(folder: Path) -> bool:
    """A folder transformers loads (ours exported, or a classifier kept by eval.save_models), not a checkpoint."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("format") != "cramming" and "model_type" in config


def auto_class(folder: Path):
    """The Auto class of the model an export holds: a sequence classifier, a multiple-choice model (both kept by
    eval.save_models), else a masked LM."""
    from transformers import (  # noqa: PLC0415 -- seconds; the GLUE tasks and export.py import this module
        AutoConfig,
        AutoModelForMaskedLM,
        AutoModelForMultipleChoice,
        AutoModelForSequenceClassification,
    )

    architectures = AutoConfig.from_pretrained(folder, trust_remote_code=True).architectures or []
    for head, auto in (("SequenceClassification", AutoModelForSequenceClassification),
                       ("MultipleChoice", AutoModelForMultipleChoice)):
        if any(head in name for name in architectures):
            return auto
    return AutoModelForMaskedLM


def load_quantized(folder: str | os.PathLike, method: str = "int8"):
    """The export in `folder` loaded with its Linear weights quantized (CPU)."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig  # noqa: PLC0415 -- only for quantize=
    from transformers import TorchAoConfig  # noqa: PLC0415 -- as in auto_class

    if method not in QUANTIZATIONS:
        raise CrammingError(f"quantize={method!r} must be one of {', '.join(QUANTIZATIONS)} (or null: none)")
    folder = Path(folder)
    config = TorchAoConfig(Int8DynamicActivationInt8WeightConfig())
    auto = auto_class(folder)
    return auto.from_pretrained(folder, trust_remote_code=True, device_map="cpu", quantization_config=config)


def write_quantized(export_dir: str | os.PathLike, out_dir: str | os.PathLike, method: str = "int8") -> dict:
    """Write the int8 copy of the export in `export_dir` to `out_dir`; returns both weight files' sizes."""
    from transformers import AutoTokenizer  # noqa: PLC0415 -- as in auto_class

    from .export import _name_a_tokenizer_class_every_version_has  # noqa: PLC0415 -- it imports transformers

    export_dir, out_dir = Path(export_dir), Path(out_dir)
    model = load_quantized(export_dir, method)
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True).save_pretrained(out_dir)
    _name_a_tokenizer_class_every_version_has(out_dir / "tokenizer_config.json")
    share_weights(out_dir)
    fp32, quantized = (export_dir / WEIGHTS).stat().st_size, (out_dir / WEIGHTS).stat().st_size
    return {"method": method, "fp32_bytes": fp32, "quantized_bytes": quantized, "ratio": quantized / fp32}
