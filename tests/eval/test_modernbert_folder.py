"""`eval_glue.py ckpt=hf:<ModernBERT folder>`: a folder written by transformers' own ModernBertForMaskedLM is
scored under the protocol, and our modern-bert export, a folder of the same class, takes the same path."""

import json

import pytest
import torch
from transformers import BertTokenizerFast, ModernBertConfig, ModernBertForMaskedLM

from cramming.eval.batching import collate
from cramming.eval.encoders import DROPOUT_KEYS, open_encoder
from cramming.eval.run import run_glue
from cramming.eval.tasks.classification import TextSplit
from cramming.eval.tasks.registry import task_named
from cramming.model import build_mlm_model
from cramming.model.checkpoint import load_pretrained, save_pretrained
from cramming.model.export import export_to_transformers
from tests.commands import in_process
from tests.model.conftest import arch_config

from .conftest import GLUE_DIR
from .test_any_encoder import bert_folder  # noqa: F401  (the fixture: a BERT folder and its RTE vocabulary)


@pytest.fixture(scope="module")
def modernbert_folder(bert_folder):
    """A small ModernBertForMaskedLM as transformers writes it, with bert_folder's vocabulary (RTE's common
    words) in a tokenizer that makes no segment ids, as ModernBERT's own; windows of 16 tokens on 2 of 3
    layers."""
    folder = bert_folder.parent / "modernbert"
    tokenizer = BertTokenizerFast(vocab_file=str(bert_folder / "vocab.txt"), do_lower_case=True,
                                  model_input_names=["input_ids", "attention_mask"])
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                              num_attention_heads=2, max_position_embeddings=512, local_attention=16,
                              pad_token_id=0, bos_token_id=2, cls_token_id=2, eos_token_id=3, sep_token_id=3)
    ModernBertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_eval_glue_scores_a_transformers_modernbert_folder(modernbert_folder, tmp_path):
    run = in_process("eval_glue", f"ckpt=hf:{modernbert_folder}", f"output_dir={tmp_path}", "eval.tasks=[rte]",
                     f"eval.data_dir={GLUE_DIR}", "eval.max_train_examples=32", "eval.epochs=1")
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert results["checkpoint"] == f"hf:{modernbert_folder}"
    assert 0 <= results["scores"]["rte"]["accuracy"] <= 100


def test_our_export_and_a_modernbert_folder_take_the_same_path(modernbert_folder, rte_checkpoint, tmp_path):
    """Both open through transformers' Auto classes as ModernBertForSequenceClassification, with the
    protocol's dropout on each of ModernBERT's four, no segment ids, and a head drawn from the seed; our
    export is then scored like the folder."""
    _, tokenizer = load_pretrained(rte_checkpoint)  # a tokenizer trained on RTE's text
    torch.manual_seed(0)
    model = build_mlm_model(arch_config("modern-bert-tiny", "local_attention=16"), len(tokenizer))
    save_pretrained(model, tmp_path / "checkpoint", tokenizer)
    export_to_transformers(tmp_path / "checkpoint", tmp_path / "export")
    for folder in (modernbert_folder, tmp_path / "export"):
        encoder = open_encoder(f"hf:{folder}", dropout=0.1)
        classifier = encoder.classifier(num_labels=2, dropout=0.1, seed=0)
        assert type(classifier).__name__ == "ModernBertForSequenceClassification"
        pair = TextSplit(["a premise"], ["a hypothesis"], [0], "a pair")
        batch = collate(task_named("rte")().encode(pair, encoder.tokenizer, 128), [0], encoder.tokenizer.pad_token_id)
        assert "token_type_ids" not in batch and classifier(**batch).logits.shape == (1, 2)  # [SEP] alone splits it
        dropouts = {key: getattr(classifier.config, key) for key in DROPOUT_KEYS if hasattr(classifier.config, key)}
        assert dropouts == dict.fromkeys(("classifier_dropout", "embedding_dropout", "attention_dropout",
                                          "mlp_dropout"), 0.1)
        again = encoder.classifier(num_labels=2, dropout=0.1, seed=0)
        assert torch.equal(again.classifier.weight, classifier.classifier.weight)
    protocol = {"tasks": ["rte"], "data_dir": str(GLUE_DIR), "max_train_examples": 32, "epochs": 1, "seeds": [0]}
    scored = run_glue(protocol, f"hf:{tmp_path / 'export'}", tmp_path / "glue")
    assert 0 <= scored["scores"]["rte"]["accuracy"] <= 100
