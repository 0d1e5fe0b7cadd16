"""ReCoRD (Reading Comprehension with Commonsense Reasoning), a SuperGLUE task: a news passage, its marked
entities, and cloze queries whose `@placeholder` stands for one of them. Every entity of the passage is a
candidate (candidate scoring, multiple_choice.py): `[CLS] passage [SEP] query with the entity in place of
@placeholder [SEP]`, one output, trained right or wrong on its own (binary cross-entropy); a query's answer is
its best-scored entity.

Scored as the official script scores it: per query the best token F1 and exact match of the answer against
any right answer (SQuAD's normalization: lower case, no punctuation, no articles), as means over the queries.
One example here is one (query, entity) candidate, so the example counts are candidates.
"""

from collections import defaultdict
from typing import Optional

import numpy as np
import torch

from cramming.errors import CrammingError
from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit
from cramming.eval.tasks.multiple_choice import CandidateTask, encode_candidates
from cramming.eval.tasks.superglue import Examples, Row, SuperGlueTask
from cramming.eval.tasks.tables import Malformed

PLACEHOLDER = "@placeholder"


def candidates(passage: str, query: str, entities: list[str], answers: list[str], idx, labelled: bool) -> list[Row]:
    """One Row per distinct entity (in the order of first mention), right when it is one of the answers."""
    if PLACEHOLDER not in query:
        raise Malformed(f"query {query[:40]!r} has no {PLACEHOLDER}")
    if not entities:
        raise Malformed(f"query {idx} has no entities to choose from")
    if labelled and not answers:
        raise Malformed(f"query {idx} has no answers")
    right = tuple(sorted(set(answers)))
    return [Row((passage, query, entity), int(entity in right), idx, right) for entity in dict.fromkeys(entities)]


class Record(SuperGlueTask, CandidateTask):
    name = "record"
    folder = "ReCoRD"
    hub_config = "record"
    submission = "ReCoRD"
    metric = "f1"  # exact match beside it

    def rows(self, record: dict, training: bool, labelled: bool) -> list[Row]:
        """An official line: a passage with its entities (start and end offsets, end included) and its queries."""
        passage = record["passage"]
        text = passage["text"]
        spans = sorted((entity["start"], entity["end"]) for entity in passage["entities"])
        entities = [text[start : end + 1] for start, end in spans]
        return [row for qa in record["qas"]
                for row in candidates(text, qa["query"], entities, [a["text"] for a in qa.get("answers", [])],
                                      qa["idx"], labelled)]

    def hub_rows(self, dataset, training: bool, labelled: bool, source: str) -> list[Row]:
        columns = zip(dataset["passage"], dataset["query"], dataset["entities"], dataset["answers"], dataset["idx"])
        rows = []
        for number, (passage, query, entities, answers, idx) in enumerate(columns):
            try:
                rows += candidates(passage, query, list(entities), list(answers), idx["query"], labelled)
            except Malformed as problem:  # the hub's rule, as GLUE's: no row is skipped
                raise CrammingError(f"{source}, row {number}: {problem}") from None
        return rows

    def encode(self, split: Examples, tokenizer, max_length: int) -> EncodedSplit:
        firsts = [row.texts[0] for row in split.rows]
        seconds = [row.texts[1].replace(PLACEHOLDER, row.texts[2]) for row in split.rows]
        scoring = [(row.idx, row.texts[2], row.answers) for row in split.rows]  # query, candidate, right answers
        return encode_candidates(firsts, seconds, split.labels, tokenizer, max_length, split.source, scoring)

    def score(self, outputs: np.ndarray, labels: np.ndarray, scoring: Optional[list] = None) -> dict[str, float]:
        best = _best_per_query(outputs[:, 0].tolist(), scoring)
        return metrics.answer_scores([entity for entity, _ in best.values()], [golds for _, golds in best.values()])

    def submission_records(self, test: Examples, outputs: torch.Tensor) -> list[dict]:
        scoring = [(row.idx, row.texts[2], row.answers) for row in test.rows]
        return [{"idx": query, "label": entity}
                for query, (entity, _) in _best_per_query(outputs[:, 0].tolist(), scoring).items()]


def _best_per_query(scores: list[float], scoring: list) -> dict:
    """{query: (its best-scored entity, its right answers)}, queries in their first row's order."""
    best: dict = {}
    top = defaultdict(lambda: float("-inf"))
    for score, (query, entity, answers) in zip(scores, scoring):
        if score > top[query]:
            top[query], best[query] = score, (entity, answers)
    return best
