"""Server submissions (`eval.predict_test=true`): one TSV per test split with the server's file name and
label strings, zipped as the GLUE server takes them. The task says where its test splits are, what each
file is called and how its labels are written (tasks/glue.py)."""

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cramming.eval.finetune import predict
from cramming.eval.tasks.base import DataMissing

log = logging.getLogger(__name__)


@dataclass
class TestSplit:
    """An unlabelled test split: what the server scores."""

    ids: list[str]
    examples: Any  # the task's split type; labels are placeholders (0)


def write_test_predictions(task, classifier, tokenizer, cfg, device, precision, folder: Path) -> dict:
    """Predict every test split of `task` with the fine-tuned classifier and write <folder>/<submission>.tsv;
    {split: file written, or "missing: <why>"}."""
    written = {}
    for split in task.eval_splits:
        try:
            test = task.load_test(split, cfg.data_dir)
        except DataMissing as reason:
            log.warning("%s: no test split for the submission (%s)", split.name, reason)
            written[split.name] = f"missing: {reason}"
            continue
        encoded = task.encode(test.examples, tokenizer, cfg.max_length)
        outputs = predict(classifier, encoded, split.name, cfg.eval_batch_size, device, precision,
                          tokenizer.pad_token_id)  # (N, num_labels)
        path = folder / f"{split.submission}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [f"{index}\t{label}" for index, label in zip(test.ids, task.label_strings(outputs))]
        path.write_text("\n".join(["index\tprediction", *rows]) + "\n")
        log.info("%s: %d test predictions in %s", split.name, len(rows), path)
        written[split.name] = str(path)
    return written


# Each server's files in <output_dir>/submission/ and the archive it takes them in.
SERVERS = {"GLUE": ("*.tsv", "glue_submission.zip"), "SuperGLUE": ("*.jsonl", "superglue_submission.zip")}


def zip_submission(output_dir: Path, server: str = "GLUE") -> str | None:
    """<output_dir>/<server's archive> of every submission file written for `server` (None if there is none):
    GLUE's TSV files, the SuperGLUE leaderboard's JSON-lines files (tasks/superglue.py)."""
    pattern, name = SERVERS[server]
    files = sorted((output_dir / "submission").glob(pattern))
    if not files:
        log.warning("eval.predict_test: no test split was found, so there is no %s submission to zip", server)
        return None
    archive = output_dir / name
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for file in files:
            zipped.write(file, file.name)
    log.info("%s submission: %s (%s)", server, archive, ", ".join(file.name for file in files))
    return str(archive)
