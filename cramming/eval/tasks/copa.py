"""COPA (Choice of Plausible Alternatives), a SuperGLUE task: a premise, whether its cause or its effect is
asked, and two alternatives; multiple choice with two choices (multiple_choice.py), scored by accuracy.

Each alternative is read as the original reads COPA's fields, `[CLS] question [SEP] premise [SEP] choice [SEP]`
(the question is the word `cause` or `effect`), and a softmax over the two scores picks one.
"""

import torch

from cramming.eval.batching import EncodedSplit
from cramming.eval.tasks.jsonl import label_of
from cramming.eval.tasks.multiple_choice import ChoiceTask, encode_choices, joined
from cramming.eval.tasks.superglue import Examples, Row, SuperGlueTask, hub_label
from cramming.eval.tasks.tables import Malformed

QUESTIONS = ("cause", "effect")


class Copa(SuperGlueTask, ChoiceTask):
    name = "copa"
    folder = "COPA"
    hub_config = "copa"
    submission = "COPA"
    metric = "accuracy"  # of the argmax over the two alternatives

    def rows(self, record: dict, training: bool, labelled: bool) -> list[Row]:
        if record["question"] not in QUESTIONS:
            raise Malformed(f"question {record['question']!r} is not cause or effect")
        texts = tuple(str(record[name]) for name in ("question", "premise", "choice1", "choice2"))
        return [Row(texts, label_of(record["label"], (0, 1)) if labelled else 0, record["idx"])]

    def hub_rows(self, dataset, training: bool, labelled: bool, source: str) -> list[Row]:
        columns = zip(*(dataset[name] for name in ("question", "premise", "choice1", "choice2")))
        labels = dataset["label"] if labelled else [0] * len(dataset)
        return [Row(texts, hub_label(label, 2, source, row), idx)
                for row, (texts, label, idx) in enumerate(zip(columns, labels, dataset["idx"]))]

    def encode(self, split: Examples, tokenizer, max_length: int) -> EncodedSplit:
        firsts = [joined(row.texts[:2], tokenizer) for row in split.rows]  # question [SEP] premise
        return encode_choices(firsts, [row.texts[2:] for row in split.rows], split.labels, tokenizer, max_length,
                              split.source)

    def submission_records(self, test: Examples, outputs: torch.Tensor) -> list[dict]:
        return [{"idx": row.idx, "label": choice} for row, choice in zip(test.rows, outputs.argmax(dim=-1).tolist())]
