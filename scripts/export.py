"""Export a checkpoint so `transformers` loads it.

    python scripts/export.py ckpt=outputs/<name>/<timestamp>/checkpoints/final out=exported/my-cram

bert-base checkpoints become native BertForMaskedLM / BertForSequenceClassification directories;
crammed-bert ones load with AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cramming.errors import exit_on_user_error  # noqa: E402
from cramming.model import export_to_transformers  # noqa: E402


@dataclass
class ExportConfig:
    ckpt: str = MISSING  # a checkpoint directory (model.safetensors, config.json, tokenizer)
    out: str = MISSING  # the directory to write


ConfigStore.instance().store(name="export_schema", node=ExportConfig)


@hydra.main(version_base="1.3", config_path="../configs", config_name="export")
@exit_on_user_error
def main(cfg: ExportConfig) -> None:
    export_to_transformers(cfg.ckpt, cfg.out)
    print(f"exported {cfg.ckpt} to {cfg.out}")


if __name__ == "__main__":
    main()
