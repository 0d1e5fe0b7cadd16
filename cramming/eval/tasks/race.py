"""RACE (ReAding Comprehension from Examinations, Lai et al., 2017), multiple choice beyond GLUE under its
fixed protocol (`eval.tasks=[race]`, `eval=race`): an English exam's article, a question and four options,
one of them right, from middle-school and high-school exams.

Each option is read as the original reads RACE's fields, `[CLS] question [SEP] article [SEP] option [SEP]`,
scored from its [CLS], and a softmax over the four picks one (multiple_choice.py). Trained on both levels'
training sets; scored by accuracy on the dev set, on both levels (`accuracy`) and on each
(`accuracy_middle`, `accuracy_high`). There is no leaderboard to submit to: eval.predict_test writes nothing.

Data: the hub's `ehovy/race` (configs `middle` and `high`), or the release's layout under
`<data_dir>/RACE/{train,dev}/{middle,high}/*.txt`, one JSON object a file: `article`, and per question its
`questions`, `options` (four) and `answers` (A-D) entries. A question with another number of options or an
answer outside A-D is malformed under tables.py's rule (counted by question).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from cramming.errors import CrammingError
from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit
from cramming.eval.tasks.base import DataMissing, EvalSplit, TaskData, load_hub
from cramming.eval.tasks.multiple_choice import ChoiceTask, encode_choices, joined
from cramming.eval.tasks.tables import Malformed, not_utf8, tolerate

HUB_PATH = "ehovy/race"
LEVELS = ("middle", "high")
ANSWERS = ("A", "B", "C", "D")


@dataclass
class RaceSplit:
    """The questions of one split: its article, the question, four options, the right one, the level."""

    per_example: ClassVar[tuple[str, ...]] = ("articles", "questions", "options", "labels", "levels")  # base.take
    articles: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    options: list[tuple[str, ...]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    source: str = ""  # folder or hub split, for messages
    skipped_rows: list[int] = field(default_factory=list)  # ordinals of tolerated malformed questions

    def __len__(self) -> int:
        return len(self.labels)

    def add(self, article: str, question: str, options, answer, level: str) -> None:
        """One question; Malformed when its options are not four or its answer is not one of A-D."""
        if not isinstance(options, list) or len(options) != len(ANSWERS):
            raise Malformed(f"options {json.dumps(options)[:60]} are not four")
        if answer not in ANSWERS:
            raise Malformed(f"answer {json.dumps(answer)} is not one of A-D")
        self.articles.append(str(article))
        self.questions.append(str(question))
        self.options.append(tuple(str(option) for option in options))
        self.labels.append(ANSWERS.index(answer))
        self.levels.append(level)


def read_folder(folder: Path, max_malformed_fraction: float) -> RaceSplit:
    """<folder>/{middle,high}/*.txt of the release (the levels there are); DataMissing when neither is."""
    levels = [level for level in LEVELS if (folder / level).is_dir()]
    if not levels:
        raise DataMissing(f"{folder}/{{middle,high}} not found")
    split, malformed, first_problem, questions = RaceSplit(source=str(folder)), [], "", 0
    for level in levels:
        for path in sorted((folder / level).glob("*.txt")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                triples = list(zip(record["questions"], record["options"], record["answers"], strict=True))
                article = record["article"]
            except UnicodeDecodeError:
                raise not_utf8(path) from None
            except (ValueError, KeyError, TypeError) as error:  # not JSON, a field absent, lists of other lengths
                questions += 1
                malformed.append(questions)
                first_problem = first_problem or f"{path}, line {getattr(error, 'lineno', 1)}: {_why(error)}"
                continue
            for number, (question, options, answer) in enumerate(triples, start=1):
                questions += 1
                try:
                    split.add(article, question, options, answer, level)
                except Malformed as problem:
                    malformed.append(questions)
                    first_problem = first_problem or f"{path}, line 1, question {number}: {problem}"
    if questions == 0:
        raise CrammingError(f"{folder}: no examples (no *.txt file in {' or '.join(levels)})")
    tolerate(folder, len(split), malformed, first_problem, max_malformed_fraction)
    split.skipped_rows = malformed
    return split


def _why(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at column {error.colno})"
    if isinstance(error, KeyError):
        return f"no field {error.args[0]!r}"
    return f"questions, options and answers are not lists of one length ({error})"


def load_hub_split(split: str) -> RaceSplit:
    """Both levels of one split of `ehovy/race` through `datasets.load_dataset` (downloaded once, cached)."""
    race = RaceSplit(source=f"{HUB_PATH}/{{{','.join(LEVELS)}}}:{split}")
    for level in LEVELS:
        dataset = load_hub(HUB_PATH, level, split)
        columns = zip(dataset["article"], dataset["question"], dataset["options"], dataset["answer"])
        for row, (article, question, options, answer) in enumerate(columns):
            try:
                race.add(article, question, list(options), answer, level)
            except Malformed as problem:  # the hub's rule, as GLUE's: no row is skipped
                raise CrammingError(f"{HUB_PATH}/{level}:{split}, row {row}: {problem}") from None
    if not race:
        raise CrammingError(f"{race.source}: no examples")
    return race


class Race(ChoiceTask):
    name = "race"
    eval_splits = (EvalSplit("race", "dev", "validation"),)
    metric = "accuracy"  # on both levels; accuracy_middle and accuracy_high beside it

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """The train and dev splits of both levels, from `<data_dir>/RACE/` or the hub."""
        def read(folder: str, hub_split: str) -> RaceSplit:
            if data_dir is None:
                return load_hub_split(hub_split)
            return read_folder(Path(data_dir) / "RACE" / folder, max_malformed_fraction)

        train = read("train", "train")
        try:
            return TaskData(self, train, {"race": read("dev", "validation")}, {})
        except DataMissing as reason:
            raise DataMissing(f"no dev split: {reason}") from None

    def encode(self, split: RaceSplit, tokenizer, max_length: int) -> EncodedSplit:
        firsts = [joined((question, article), tokenizer) for question, article in zip(split.questions, split.articles)]
        return encode_choices(firsts, split.options, split.labels, tokenizer, max_length, split.source, split.levels)

    def score(self, outputs: np.ndarray, labels: np.ndarray, scoring: Optional[list] = None) -> dict[str, float]:
        predicted, levels = outputs.argmax(axis=-1), np.array(scoring)
        scores = metrics.classification_scores("accuracy", predicted, labels)
        for level in LEVELS:
            chosen = levels == level
            if chosen.any():
                scores[f"accuracy_{level}"] = metrics.classification_scores("accuracy", predicted[chosen],
                                                                           labels[chosen])["accuracy"]
        return scores
