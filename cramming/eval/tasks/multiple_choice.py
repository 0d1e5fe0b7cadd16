"""Tasks that score candidates with one output each: SWAG's endings, COPA's alternatives, RACE's options
(a softmax over the choices: multiple choice), and MultiRC's answers and ReCoRD's entities (each candidate
right or wrong on its own: candidate scoring).

Every candidate is read as GLUE reads a sentence pair, `[CLS] a [SEP] b [SEP]`, and scored from its [CLS] by
the GLUE classifier with one output (the same pooler and head in every code path), as transformers'
*ForMultipleChoice models score their choices. What such a task trained is kept (eval.save_models) as the
multiple-choice model of its architecture, which holds the same weights.
"""

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from cramming.eval.batching import EncodedSplit
from cramming.eval.parameter_efficient import merged
from cramming.eval.tasks.base import Task
from cramming.files import share_weights
from cramming.library_noise import without_load_report
from cramming.model.quantize import auto_class

log = logging.getLogger(__name__)


def token_types_of(encoded, tokenizer) -> Optional[list]:
    """Segment ids where the tokenizer's model reads them (its model_input_names), else None."""
    return encoded.get("token_type_ids") if "token_type_ids" in tokenizer.model_input_names else None


def joined(texts: tuple[str, ...], tokenizer) -> str:
    """Fields as one segment, as the original Cramming code joins them: separated by the tokenizer's separator
    token (RACE's question and article, COPA's question and premise, ...)."""
    return (f" {tokenizer.sep_token} " if tokenizer.sep_token else " ").join(texts)


def encode_choices(firsts: list[str], choices: list[tuple[str, ...]], labels: list[int], tokenizer, max_length: int,
                   source: str, scoring: Optional[list] = None) -> EncodedSplit:
    """Example i as the pairs (firsts[i], choice) for each of its choices, truncated as GLUE's pairs are:
    input_ids[i] is a list of one token list per choice (batching pads them to (B, choices, T))."""
    count = len(choices[0]) if choices else 0
    encoded = tokenizer([first for first, options in zip(firsts, choices) for _ in options],
                        [option for options in choices for option in options], truncation=True, max_length=max_length)

    def grouped(rows: list[list[int]]) -> list[list[list[int]]]:
        return [rows[i : i + count] for i in range(0, len(rows), count)]

    token_types = token_types_of(encoded, tokenizer)
    types = None if token_types is None else grouped(token_types)
    return EncodedSplit(grouped(encoded["input_ids"]), torch.tensor(labels, dtype=torch.int64), source, types, scoring)


def encode_candidates(firsts: list[str], seconds: list[str], labels: list[int], tokenizer, max_length: int,
                      source: str, scoring: Optional[list] = None) -> EncodedSplit:
    """One pair a candidate, truncated as GLUE's pairs are; labels 1 (right) or 0."""
    encoded = tokenizer(firsts, seconds, truncation=True, max_length=max_length)
    return EncodedSplit(encoded["input_ids"], torch.tensor(labels, dtype=torch.int64), source,
                        token_types_of(encoded, tokenizer), scoring)


class MultipleChoice(nn.Module):
    """A one-output GLUE classifier (`scorer`) as a multiple-choice model: each choice scored from its [CLS],
    cross-entropy over the choices."""

    def __init__(self, scorer: nn.Module):
        super().__init__()
        self.scorer = scorer

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """input_ids, attention_mask, token_type_ids (B, choices, T); labels (B,) the right choice;
        logits (B, choices)."""
        B, choices, T = input_ids.shape
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        flat = {key: value.reshape(B * choices, T) for key, value in inputs.items() if value is not None}
        from transformers.modeling_outputs import MultipleChoiceModelOutput  # noqa: PLC0415 -- imported by the registry

        logits = self.scorer(**flat).logits.view(B, choices)  # (B * choices, 1) -> (B, choices)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels)
        return MultipleChoiceModelOutput(loss=loss, logits=logits)


class CandidateScorer(nn.Module):
    """The same one-output scorer on candidates that are each right or wrong (MultiRC's answers, ReCoRD's
    entities): binary cross-entropy of each score; logits (B, 1), a candidate is predicted right above 0."""

    def __init__(self, scorer: nn.Module):
        super().__init__()
        self.scorer = scorer

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """input_ids, attention_mask, token_type_ids (B, T); labels (B,) 1 for a right candidate."""
        from transformers.modeling_outputs import SequenceClassifierOutput  # noqa: PLC0415 -- as above

        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        logits = self.scorer(**{key: value for key, value in inputs.items() if value is not None}).logits  # (B, 1)
        loss = None if labels is None else F.binary_cross_entropy_with_logits(logits[:, 0].float(), labels.float())
        return SequenceClassifierOutput(loss=loss, logits=logits)


class RowsAsOneChoice(nn.Module):
    """A kept multiple-choice model scoring candidate rows (B, T) as (B, 1, T): logits (B, 1)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **inputs):
        return self.model(**{key: value.unsqueeze(1) for key, value in inputs.items() if value is not None})


class ChoiceTask(Task):
    """A task whose model is `model_class` around a one-output scorer; kept as a multiple-choice model.
    Subclasses set a Task's attributes and load and encode their data."""

    model_class: type = MultipleChoice
    head = "a multiple-choice head"

    def model(self, encoder, dropout: float, seed: int, lora=None) -> nn.Module:
        return self.model_class(encoder.classifier(1, dropout, seed, lora))

    def save(self, model: nn.Module, encoder, folder: Path) -> None:
        """The one-output scorer as the encoder saves a classifier, then read back as the multiple-choice model
        of its architecture, which holds the same weights (ours, BERT's: checked key by key). An architecture
        whose multiple-choice model has another head (RoBERTa's reads the pooler, its classifier does not)
        keeps the scorer as a one-output sequence classifier, and a warning says so."""
        with tempfile.TemporaryDirectory() as scorer:
            encoder.save(merged(model.scorer).cpu(), Path(scorer))
            shutil.copytree(scorer, folder, dirs_exist_ok=True)  # the tokenizer (and remote code) with it
            choices, differ = _as_multiple_choice(Path(scorer))
        if differ:
            log.warning("%s: the multiple-choice model of its architecture does not hold the scorer %s trained "
                        "(%s): kept as a one-output sequence classifier", folder, self.name.upper(),
                        ", ".join(differ[:3]))
            return
        choices.config.problem_type = None  # the scorer's "regression" (one output) says nothing here
        choices.save_pretrained(folder)
        share_weights(folder)

    def saved_model(self, folder: Path) -> Optional[nn.Module]:
        from transformers import AutoModelForMultipleChoice  # noqa: PLC0415 -- as above

        if auto_class(folder) is not AutoModelForMultipleChoice:
            return None
        model = AutoModelForMultipleChoice.from_pretrained(folder, trust_remote_code=True)
        return model if self.model_class is MultipleChoice else RowsAsOneChoice(model)


class CandidateTask(ChoiceTask):
    """A task whose candidates are each right or wrong on its own (MultiRC, ReCoRD): one row a candidate."""

    model_class = CandidateScorer
    head = "a one-output candidate scorer (kept as a multiple-choice model)"


def _as_multiple_choice(folder: Path) -> tuple[Optional[nn.Module], list[str]]:
    """The one-output classifier in `folder` loaded as AutoModelForMultipleChoice, and what did not fit: the
    weights either lacks or leaves unused or has in another shape (all empty: the same model)."""
    from transformers import AutoModelForMultipleChoice  # noqa: PLC0415 -- as above

    try:
        with without_load_report():
            model, report = AutoModelForMultipleChoice.from_pretrained(folder, trust_remote_code=True,
                                                                       output_loading_info=True)
    except ValueError as error:  # the architecture has no multiple-choice class
        return None, [str(error).strip().splitlines()[0]]
    kinds = ("missing_keys", "unexpected_keys", "mismatched_keys")
    return model, [str(key[0] if isinstance(key, tuple) else key) for kind in kinds for key in report[kind]]
