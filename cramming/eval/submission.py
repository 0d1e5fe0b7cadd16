"""GLUE-server submissions (`eval.predict_test=true`): one TSV per test split with the server's file name
and label strings, zipped as the server takes them."""

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from cramming.eval.batching import encode_split
from cramming.errors import CrammingError
from cramming.eval.data import EvalSplit, GlueDataMissing, GlueSplit, GlueTask, lines, load_hub_split
from cramming.eval.finetune import predict

log = logging.getLogger(__name__)

# The GLUE server's file names and test files/hub splits, by EvalSplit.name.
SUBMISSION_FILES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
                    "mnli-m": "MNLI-m", "mnli-mm": "MNLI-mm", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
TEST_SPLITS = {"mnli-m": ("test_matched.tsv", "test_matched"), "mnli-mm": ("test_mismatched.tsv", "test_mismatched")}
TEST_ID_COLUMNS = ("index", "id", "idx")


@dataclass
class TestSplit:
    """An unlabelled test split: what the GLUE server scores."""

    ids: list[str]
    examples: GlueSplit  # labels are placeholders (0)


def load_test_split(task: GlueTask, split: EvalSplit, data_dir: Optional[str]) -> TestSplit:
    """The test counterpart of an evaluation split: `test.tsv` (MNLI: test_{mis,}matched.tsv), whose header
    names an id column and the text columns, or the hub's test split. GlueDataMissing if absent."""
    file, hub_split = TEST_SPLITS.get(split.name, ("test.tsv", "test"))
    first, second = task.tsv_text_columns if data_dir is not None else task.hub_text_columns
    if data_dir is None:
        dataset = load_hub_split(task, hub_split, labelled=False)
        return TestSplit([str(i) for i in range(len(dataset))], dataset)
    path = Path(data_dir) / task.folder / file
    if not path.is_file():
        raise GlueDataMissing(f"{path} not found")
    rows = list(lines(path))
    if not rows:
        raise CrammingError(f"{path}: empty file")
    header = rows[0][1].split("\t")
    id_column = next((name for name in TEST_ID_COLUMNS if name in header), None)
    absent = [name for name in (id_column, first, second) if name is not None and name not in header]
    if id_column is None or absent:
        raise CrammingError(f"{path}, line 1: the header needs an id column ({'/'.join(TEST_ID_COLUMNS)}) and "
                            f"{', '.join(name for name in (first, second) if name)}")
    ids, text_a, text_b = [], [], []
    for number, line in rows[1:]:
        fields = line.split("\t")
        if len(fields) != len(header):
            raise CrammingError(f"{path}, line {number}: expected {len(header)} tab-separated fields, found "
                                f"{len(fields)} (every test row needs a prediction, none may be skipped)")
        ids.append(fields[header.index(id_column)])
        text_a.append(fields[header.index(first)])
        if second is not None:
            text_b.append(fields[header.index(second)])
    if not ids:
        raise CrammingError(f"{path}: no examples (only a header)")
    return TestSplit(ids, GlueSplit(text_a, text_b if second else None, [0] * len(ids), str(path)))


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
