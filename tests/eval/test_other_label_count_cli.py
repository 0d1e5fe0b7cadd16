"""A transformers classifier fine-tuned on a task with another label count (an MNLI classifier on RTE, an RTE
classifier on STS-B) through `eval_glue.py ckpt=hf:<folder>`: the head is drawn fresh for the task's labels,
with one line saying so. A real BertForSequenceClassification saved to a local folder, a real tokenizer."""

import json

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer

from .conftest import GLUE_DIR
from .test_eval_glue_cli import _eval_glue


def saved_classifier(folder, num_labels: int):
    """A tiny BERT classifier with `num_labels` outputs and a WordPiece tokenizer trained on RTE's text."""
    lines = (GLUE_DIR / "RTE" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    texts = [text for line in lines if line for text in line.split("\t")[1:3]]
    tokenizer = as_transformers_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=1000, min_frequency=1),
                                                          NormalizeConfig()))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, num_labels=num_labels)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("saved_labels", "task", "message"), [
    (3, "rte", "the checkpoint's 3-label head re-initialised for 2 labels: classifier.bias, classifier.weight"),
    (2, "stsb", "the checkpoint's 2-label head re-initialised for 1 label: classifier.bias, classifier.weight"),
])
@pytest.mark.slow
def test_a_classifier_with_another_label_count_gets_a_fresh_head(tmp_path, saved_labels, task, message):
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE TSV files not found at {GLUE_DIR}")
    folder = saved_classifier(tmp_path / "classifier", saved_labels)
    run = _eval_glue(f"ckpt=hf:{folder}", f"eval.tasks=[{task}]", f"eval.data_dir={GLUE_DIR}",
                     "eval.max_train_examples=32", "eval.epochs=1", f"output_dir={tmp_path / 'glue'}")
    assert run.returncode == 0, run.stderr
    console = run.stdout + run.stderr
    assert "Traceback" not in console and "LOAD REPORT" not in console
    assert [line for line in console.splitlines() if message in line] != []
    results = json.loads((tmp_path / "glue" / "glue_results.json").read_text())
    assert results["glue_score_over"] == [task]
