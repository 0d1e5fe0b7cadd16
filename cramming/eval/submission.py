"""GLUE-server submissions (`eval.predict_test=true`): one TSV per test split with the server's file name
and label strings, zipped as the server takes them."""

import logging
import zipfile
from pathlib import Path

import torch

from cramming.eval.batching import encode_split
from cramming.eval.data import SUBMISSION_FILES, GlueDataMissing, GlueTask, load_test_split
from cramming.eval.finetune import predict

log = logging.getLogger(__name__)


def write_test_predictions(task: GlueTask, classifier, tokenizer, cfg, device, precision, folder: Path) -> dict:
    """Predict every test split of `task` with the fine-tuned classifier and write <folder>/<NAME>.tsv;
    {split: file written, or "missing: <why>"}."""
    written = {}
    for split in task.eval_splits:
        try:
            test = load_test_split(task, split, cfg.data_dir)
        except GlueDataMissing as reason:
            log.warning("%s: no test split for the submission (%s)", split.name, reason)
            written[split.name] = f"missing: {reason}"
            continue
        encoded = encode_split(test.examples, tokenizer, cfg.max_length, regression=task.num_labels == 1)
        outputs = predict(classifier, encoded, split.name, cfg.eval_batch_size, device, precision,
                          tokenizer.pad_token_id)  # (N, num_labels)
        path = folder / f"{SUBMISSION_FILES[split.name]}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [f"{index}\t{label}" for index, label in zip(test.ids, label_strings(task, outputs))]
        path.write_text("\n".join(["index\tprediction", *rows]) + "\n")
        log.info("%s: %d test predictions in %s", split.name, len(rows), path)
        written[split.name] = str(path)
    return written


def label_strings(task: GlueTask, outputs: torch.Tensor) -> list[str]:
    """The server's labels: the TSV label strings (entailment, ..., or 0/1), STS-B scores within [0, 5]."""
    if task.tsv_labels is None:
        return [f"{score:.3f}" for score in outputs[:, 0].clamp(0, 5).tolist()]
    return [task.tsv_labels[label] for label in outputs.argmax(dim=-1).tolist()]


def zip_submission(output_dir: Path) -> str | None:
    """<output_dir>/glue_submission.zip of every submission file written (None if there is none)."""
    files = sorted((output_dir / "submission").glob("*.tsv"))
    if not files:
        log.warning("eval.predict_test: no test split was found, so there is no submission to zip")
        return None
    archive = output_dir / "glue_submission.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for file in files:
            zipped.write(file, file.name)
    log.info("GLUE submission: %s (%s)", archive, ", ".join(file.name for file in files))
    return str(archive)
