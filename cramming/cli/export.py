"""Export a checkpoint so `transformers` loads it: `python scripts/export.py` or `cramming-export`.

    python scripts/export.py ckpt=outputs/<name>/<timestamp>/checkpoints/final out=exported/my-cram
    python scripts/export.py ckpt=latest out=exported/my-cram
    python scripts/export.py ckpt=latest out=exported/my-cram push_to_hub=<user>/<name>   # then upload it
    python scripts/export.py ckpt=latest out=exported/my-cram-int8 quantize=int8           # int8 copy (torchao)
    python scripts/export.py ckpt=outputs/glue/<ts>/models/rte-seed0 out=exported/rte-int8 quantize=int8 \
        quantize_eval_task=rte glue_dir=glue    # a fine-tuned classifier: its dev score before and after

bert-base checkpoints become native BertForMaskedLM / BertForSequenceClassification directories;
crammed-bert ones load with AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).
"""

import json
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from cramming.cli import hydra_command
from cramming.errors import CrammingError, problems_of, raise_problems, require
from cramming.train.runs import resolve_checkpoint


@dataclass
class ExportConfig:
    ckpt: str = MISSING  # a checkpoint directory, a run directory (its final or newest checkpoint), or latest
    out: str = MISSING  # the directory to write
    runs_dir: str = "outputs"  # where `ckpt=latest` looks for the newest pretraining run
    push_to_hub: Optional[str] = None  # a Hub model repo (<user>/<name>): upload the export once it is written
    # int8: `out` gets a dynamically int8-quantized copy (cramming.model.quantize); ckpt may then also be a
    # transformers folder (an export, or a classifier eval_glue.py kept with eval.save_models=true)
    quantize: Optional[str] = None
    quantize_eval_task: Optional[str] = None  # a GLUE task: score the classifier before and after quantizing
    glue_dir: Optional[str] = None  # for quantize_eval_task: the classic GLUE TSV layout; null: the hub
    overwrite: bool = False  # true: a non-empty `out` is emptied first (false: refused, never mixed with the export)

    def check(self) -> None:
        """Every setting and what it will need (the GLUE task's files, a Hub login), before any export work."""
        raise_problems(problems_of(self._check_values, self._check_glue, self._check_hub_login))

    def _check_values(self) -> None:
        from cramming.model.quantize import QUANTIZATIONS  # noqa: PLC0415 -- torch: not at every command start

        require([
            (self.quantize is None or self.quantize in QUANTIZATIONS,
             f"quantize={self.quantize!r} must be one of {', '.join(QUANTIZATIONS)} (or null: none)"),
            (self.quantize is not None or (self.quantize_eval_task is None and self.glue_dir is None),
             "quantize_eval_task and glue_dir score a quantized copy: add quantize=int8"),
            (self.quantize is None or not self.push_to_hub,
             "push_to_hub with quantize: upload the folder afterwards (hf upload <repo> <out>)"),
        ])

    def _check_glue(self) -> None:
        if self.quantize_eval_task is not None:
            from cramming.eval.tasks.registry import GlueConfig  # noqa: PLC0415 -- torch, for quantize_eval_task only
            from cramming.preflight.checks import check_glue_data  # noqa: PLC0415 -- as above

            check_glue_data(GlueConfig(tasks=[self.quantize_eval_task], data_dir=self.glue_dir, skip_missing=True),
                            "glue_dir")  # the task's dev splits that have files are scored

    def _check_hub_login(self) -> None:
        if self.push_to_hub:
            from huggingface_hub import get_token  # noqa: PLC0415 -- only for push_to_hub

            if not get_token():
                raise CrammingError(f"push_to_hub={self.push_to_hub}: no Hugging Face token (HF_TOKEN, or "
                                    "`hf auth login`): log in first; the export itself needs none")


ConfigStore.instance().store(name="export_schema", node=ExportConfig)


@hydra_command("export", ExportConfig, directories=("out",))
def main(cfg: ExportConfig) -> None:
    cfg = OmegaConf.to_object(cfg)
    cfg.check()
    if cfg.quantize is not None:
        return _quantize(cfg)
    checkpoint = resolve_checkpoint(cfg.ckpt, cfg.runs_dir, key="ckpt")
    empty_out(Path(cfg.out), checkpoint, cfg.overwrite)
    # after the checkpoint is found: transformers takes seconds to import, and a missing ckpt is one line without it
    from cramming.model.export import export_to_transformers  # noqa: PLC0415 -- transformers, as said above

    export_to_transformers(checkpoint, cfg.out)
    print(f"exported {checkpoint} to {cfg.out}")
    if cfg.push_to_hub:
        from cramming.model.publish import check_loadable, push_to_hub  # noqa: PLC0415 -- only for push_to_hub

        check_loadable(Path(cfg.out))
        print(f"uploaded to {push_to_hub(Path(cfg.out), cfg.push_to_hub)}")
    for line in next_steps(Path(cfg.out)):
        print(f"next: {line}")


def next_steps(out: Path) -> list[str]:
    """What to run on an export, as commands to copy: GLUE through transformers, and for a masked LM its
    fill-mask pipeline (which never proposes a special token)."""
    steps = [f"python eval_glue.py ckpt=hf:{out}   # GLUE through transformers: its tasks from the hub, or "
             "eval.data_dir=<folder>"]
    if any(name.endswith("ForMaskedLM") for name in json.loads((out / "config.json").read_text())["architectures"]):
        code = (f'from transformers import pipeline; fill = pipeline("fill-mask", model={json.dumps(str(out))}, '
                'trust_remote_code=True); print([c["token_str"] for c in fill("the [MASK] of the house.")])')
        steps.append(f"python -c {shlex.quote(code)}   # its five likeliest words for [MASK]")
    return steps


def empty_out(out: Path, source: Path, overwrite: bool) -> None:
    """`out` new or empty before the export writes it: a non-empty one is refused, as its files would mix with
    the export's, unless overwrite=true, which empties it; a folder holding `source` never is."""
    out, source = out.expanduser(), Path(source).expanduser()
    if not out.is_dir() or not any(out.iterdir()):
        return
    if out.resolve() == source.resolve() or out.resolve() in source.resolve().parents:
        raise CrammingError(f"export into the checkpoint directory itself ({source}): choose another")
    if not overwrite:
        entries = sum(1 for _ in out.iterdir())
        raise CrammingError(f"out={out} is not empty (it holds {entries} file(s) or folder(s)): the export would mix "
                            "with them; choose a new or empty folder, or add overwrite=true to replace what is there")
    shutil.rmtree(out)


def _quantize(cfg: ExportConfig) -> None:
    """The int8 copy in `out` of a checkpoint (exported to a temporary folder first) or of a transformers
    folder; its size against the fp32 export's, and with quantize_eval_task the GLUE dev scores of both."""
    from cramming.eval.run import glue_dev_scores  # noqa: PLC0415 -- transformers, for quantize= only
    from cramming.model.export import export_to_transformers  # noqa: PLC0415 -- as above
    from cramming.model.quantize import (  # noqa: PLC0415 -- as above
        auto_class,
        is_transformers_export,
        write_quantized,
    )

    with tempfile.TemporaryDirectory() as temporary:
        source = given = Path(cfg.ckpt).expanduser()
        if not is_transformers_export(source):
            given = resolve_checkpoint(cfg.ckpt, cfg.runs_dir, key="ckpt")
            source = Path(temporary) / "fp32"
            export_to_transformers(given, source)
        empty_out(Path(cfg.out), given, cfg.overwrite)  # (a folder as `ckpt` is exported to a temporary one)
        if cfg.quantize_eval_task and auto_class(source).__name__.endswith("MaskedLM"):  # before any int8 work
            found = f" ({given})" if given != Path(cfg.ckpt).expanduser() else ""
            raise CrammingError(f"quantize_eval_task={cfg.quantize_eval_task}: ckpt={cfg.ckpt}{found} is not a "
                                "classifier fine-tuned on it but a masked language model; quantize one kept by "
                                "eval_glue.py eval.save_models=true (outputs/glue/<timestamp>/models/<task>-seed0)")
        report = write_quantized(source, cfg.out, cfg.quantize)
        print(f"wrote the {cfg.quantize} copy of {given} to {cfg.out}: {report['quantized_bytes'] / 2**20:.2f} MiB "
              f"of weights against {report['fp32_bytes'] / 2**20:.2f} MiB in fp32 ({report['ratio']:.2f}x)")
        if cfg.quantize_eval_task:
            task, glue_dir = cfg.quantize_eval_task, cfg.glue_dir
            before = glue_dev_scores(source, task, glue_dir)
            after = glue_dev_scores(Path(cfg.out), task, glue_dir)
            report["glue"] = {"task": task, "fp32": before, cfg.quantize: after}
            for split, scores in before.items():
                shown = ", ".join(f"{metric} {value:.2f} -> {after[split][metric]:.2f} "
                                  f"({after[split][metric] - value:+.2f})" for metric, value in scores.items())
                print(f"{split} dev, fp32 -> {cfg.quantize}: {shown}")
    (Path(cfg.out) / "quantization.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
