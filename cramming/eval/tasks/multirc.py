"""MultiRC (Multi-Sentence Reading Comprehension), a SuperGLUE task: a paragraph, questions about it, and for
each question a list of answers, any number of them right. Each answer is a candidate scored on its own
(candidate scoring, multiple_choice.py): `[CLS] question [SEP] paragraph [SEP] answer [SEP]`, as the original
reads MultiRC's fields, one output, right above 0 (binary cross-entropy: the answers of a question are not
exclusive, so a softmax over them would be wrong).

Scored by F1a, the F1 over every answer with "right" the positive class, and exact match, the share of
questions all of whose answers are judged correctly.
"""

from collections import defaultdict
from typing import Optional

import numpy as np
import torch

from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit
from cramming.eval.tasks.multiple_choice import CandidateTask, encode_candidates, joined
from cramming.eval.tasks.superglue import Examples, Row, SuperGlueTask, hub_label
from cramming.eval.tasks.tables import Malformed


def binary(value) -> int:
    """An answer's label in the official files: 0 or 1 (true or false in some copies)."""
    if value in (0, 1) and type(value) in (int, bool):
        return int(value)
    raise Malformed(f"label {value!r} is not 0 or 1")


class MultiRC(SuperGlueTask, CandidateTask):
    name = "multirc"
    folder = "MultiRC"
    hub_config = "multirc"
    submission = "MultiRC"
    metric = "f1a"  # exact match beside it

    def rows(self, record: dict, training: bool, labelled: bool) -> list[Row]:
        passage = record["passage"]
        return [Row((str(question["question"]), str(passage["text"]), str(answer["text"])),
                    binary(answer["label"]) if labelled else 0, (record["idx"], question["idx"], answer["idx"]))
                for question in passage["questions"] for answer in question["answers"]]

    def hub_rows(self, dataset, training: bool, labelled: bool, source: str) -> list[Row]:
        columns = zip(*(dataset[name] for name in ("question", "paragraph", "answer")))
        labels = dataset["label"] if labelled else [0] * len(dataset)
        return [Row(texts, hub_label(label, 2, source, row), (idx["paragraph"], idx["question"], idx["answer"]))
                for row, (texts, label, idx) in enumerate(zip(columns, labels, dataset["idx"]))]

    def encode(self, split: Examples, tokenizer, max_length: int) -> EncodedSplit:
        firsts = [joined(row.texts[:-1], tokenizer) for row in split.rows]  # question [SEP] paragraph
        questions = [row.idx[:2] for row in split.rows]  # (paragraph, question): the answer's question
        return encode_candidates(firsts, [row.texts[-1] for row in split.rows], split.labels, tokenizer, max_length,
                                 split.source, questions)

    def score(self, outputs: np.ndarray, labels: np.ndarray, scoring: Optional[list] = None) -> dict[str, float]:
        return metrics.grouped_scores((outputs[:, 0] > 0).astype(np.int64), labels, scoring)

    def submission_records(self, test: Examples, outputs: torch.Tensor) -> list[dict]:
        """One object a paragraph: {"idx", "passage": {"questions": [{"idx", "answers": [{"idx", "label"}]}]}}."""
        paragraphs: dict = defaultdict(lambda: defaultdict(list))
        for row, score in zip(test.rows, outputs[:, 0].tolist()):
            paragraph, question, answer = row.idx
            paragraphs[paragraph][question].append({"idx": answer, "label": int(score > 0)})
        return [{"idx": paragraph, "passage": {"questions": [{"idx": question, "answers": answers}
                                                             for question, answers in questions.items()]}}
                for paragraph, questions in paragraphs.items()]
