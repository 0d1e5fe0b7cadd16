"""Export to transformers: native BERT classes for bert-base, remote code for crammed-bert; same logits."""

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

from cramming.errors import CrammingError
from cramming.model import (
    build_classifier_from_pretrained,
    build_mlm_model,
    export_to_transformers,
    save_pretrained,
)

from .conftest import arch_config


@pytest.mark.parametrize(
    "name, mlm_class, classifier_class",
    [
        ("crammed-bert-tiny", "CrammedBertForMaskedLM", "CrammedBertForSequenceClassification"),
        ("bert-base-tiny", "BertForMaskedLM", "BertForSequenceClassification"),
    ],
)
def test_transformers_loads_export_with_equal_logits(tmp_path, tokenizer, name, mlm_class, classifier_class):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config(name), len(tokenizer)).eval()
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    inputs = tokenizer(["abc def ghij", "ab cd ef gh ij kl mn op"], padding=True, return_tensors="pt")
    assert inputs["attention_mask"].min() == 0  # the batch is padded

    hf_mlm = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert type(hf_mlm).__name__ == mlm_class
    with torch.no_grad():
        expected = model(inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        torch.testing.assert_close(hf_mlm(**inputs).logits, expected, rtol=1e-4, atol=1e-4)

    classifier, _ = build_classifier_from_pretrained(tmp_path / "ckpt", num_labels=3)
    torch.nn.init.normal_(classifier.head.dense.bias, std=0.5)  # make every head parameter count
    save_pretrained(classifier.eval(), tmp_path / "classifier", tokenizer)
    export_to_transformers(tmp_path / "classifier", tmp_path / "hf-classifier")
    hf_classifier = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf-classifier", trust_remote_code=True
    ).eval()
    assert type(hf_classifier).__name__ == classifier_class
    with torch.no_grad():
        expected = classifier(inputs["input_ids"], inputs["attention_mask"]).logits
        torch.testing.assert_close(hf_classifier(**inputs).logits, expected, rtol=1e-4, atol=1e-4)

    # an exported masked-LM also starts a classifier in transformers: encoder loaded, fresh head
    fresh = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf", trust_remote_code=True, num_labels=2
    )
    assert fresh(**inputs).logits.shape == (2, 2) and torch.isfinite(fresh(**inputs).logits).all()


def test_export_refuses_its_own_directory(tmp_path, tokenizer):
    model = build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer))
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    with pytest.raises(CrammingError, match="export into the checkpoint directory itself"):
        export_to_transformers(tmp_path / "ckpt", tmp_path / "ckpt")
