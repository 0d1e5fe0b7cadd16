"""Export a checkpoint so `transformers` loads it: `python scripts/export.py` or `cramming-export`.

    python scripts/export.py ckpt=outputs/<name>/<timestamp>/checkpoints/final out=exported/my-cram
    python scripts/export.py ckpt=latest out=exported/my-cram
    python scripts/export.py ckpt=latest out=exported/my-cram push_to_hub=<user>/<name>   # then upload it

bert-base checkpoints become native BertForMaskedLM / BertForSequenceClassification directories;
crammed-bert ones load with AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.cli import hydra_command
from cramming.runs import resolve_checkpoint


@dataclass
class ExportConfig:
    ckpt: str = MISSING  # a checkpoint directory, a run directory (its final or newest checkpoint), or latest
    out: str = MISSING  # the directory to write
    runs_dir: str = "outputs"  # where `ckpt=latest` looks for the newest pretraining run
    push_to_hub: Optional[str] = None  # a Hub model repo (<user>/<name>): upload the export once it is written


ConfigStore.instance().store(name="export_schema", node=ExportConfig)


@hydra_command("export", ExportConfig, directories=("out",))
def main(cfg: ExportConfig) -> None:
    from cramming.model.export import export_to_transformers

    checkpoint = resolve_checkpoint(cfg.ckpt, cfg.runs_dir, key="ckpt")
    export_to_transformers(checkpoint, cfg.out)
    print(f"exported {checkpoint} to {cfg.out}")
    if cfg.push_to_hub:
        from cramming.model.publish import check_loadable, push_to_hub

        check_loadable(Path(cfg.out))
        print(f"uploaded to {push_to_hub(Path(cfg.out), cfg.push_to_hub)}")


if __name__ == "__main__":
    main()
