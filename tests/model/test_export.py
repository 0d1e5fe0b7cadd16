"""Export to transformers: native BERT classes for bert-base, remote code for crammed-bert; same logits."""

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    pipeline,
)
from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

from cramming.errors import CrammingError
from cramming.model import build_classifier, build_mlm_model
from cramming.model.checkpoint import build_classifier_from_pretrained, save_pretrained
from cramming.model.crammed_bert import SPECIAL_IDS
from cramming.model.export import export_to_transformers

from .conftest import SCHEMES, arch_config

CRAMMING = Path(__file__).resolve().parents[2] / "cramming"


@pytest.mark.parametrize(
    "name, overrides, mlm_class, classifier_class",
    [
        ("crammed-bert-tiny", (), "CrammedBertForMaskedLM", "CrammedBertForSequenceClassification"),
        ("bert-base-tiny", (), "BertForMaskedLM", "BertForSequenceClassification"),
        # BERT's layout with what transformers' BERT lacks (residual gates, DeepNorm's α): the remote code
        ("bert-base-tiny", ("init_scheme=skipinit",), "CrammedBertForMaskedLM", "CrammedBertForSequenceClassification"),
        ("bert-base-tiny", ("init_scheme=deepnorm",), "CrammedBertForMaskedLM", "CrammedBertForSequenceClassification"),
    ],
)
def test_transformers_loads_export_with_equal_logits(tmp_path, tokenizer, name, overrides, mlm_class,
                                                     classifier_class):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config(name, *overrides), len(tokenizer)).eval()
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    inputs = tokenizer(["abc def ghij", "ab cd ef gh ij kl mn op"], padding=True, return_tensors="pt")
    assert inputs["attention_mask"].min() == 0  # the batch is padded

    hf_mlm = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert type(hf_mlm).__name__ == mlm_class
    real = inputs["attention_mask"].bool()  # padded positions have no defined output (ours are zeros)
    with torch.no_grad():
        expected = model(inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        torch.testing.assert_close(hf_mlm(**inputs).logits[real], expected[real], rtol=1e-4, atol=1e-4)
    never_special_in_fill_mask(tmp_path / "hf", len(tokenizer))

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


def never_special_in_fill_mask(export: Path, vocab_size: int) -> None:
    """transformers' fill-mask pipeline on the export: its every candidate but the special tokens' comes first
    (an untrained model's top guess was [MASK] itself, its tied embedding being closest)."""
    fill = pipeline("fill-mask", model=str(export), trust_remote_code=True, top_k=vocab_size - SPECIAL_IDS)
    candidates = fill("abc [MASK] ghij")
    assert len(candidates) == vocab_size - SPECIAL_IDS
    assert min(candidate["token"] for candidate in candidates) >= SPECIAL_IDS, candidates[:3]


def test_the_models_special_ids_are_the_vocabularys():
    """crammed_bert.py ships as remote code and cannot import cramming.data.vocab: the same five ids, written twice."""
    from cramming.data.vocab import MASK_ID, SPECIAL_TOKENS

    assert SPECIAL_IDS == len(SPECIAL_TOKENS) and MASK_ID == SPECIAL_IDS - 1


def test_export_refuses_its_own_directory(tmp_path, tokenizer):
    model = build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer))
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    with pytest.raises(CrammingError, match="export into the checkpoint directory itself"):
        export_to_transformers(tmp_path / "ckpt", tmp_path / "ckpt")


@pytest.mark.parametrize("init_scheme, norm_scheme", SCHEMES)
def test_remote_code_initializes_as_training_does(tmp_path, tokenizer, init_scheme, norm_scheme):
    """One initialization: from the same seed, transformers builds the exported architecture with exactly
    the training model's weights (so its logits are the same), init_scheme included. And a trained model
    (gates open, every weight moved) exports with the same logits: the scheme's gates and α included."""
    cfg = arch_config("crammed-bert-tiny", f"init_scheme={init_scheme}", f"norm_scheme={norm_scheme}")
    vocab_size = len(tokenizer)
    trained = build_mlm_model(cfg, vocab_size).eval()
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    save_pretrained(trained, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    config = AutoConfig.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    assert (config.init_scheme, config.norm_scheme) == (init_scheme, norm_scheme)
    classifier_config = AutoConfig.from_pretrained(tmp_path / "hf", trust_remote_code=True, num_labels=3)
    inputs = tokenizer(["abc def ghij", "ab cd ef gh ij kl mn op"], padding=True, return_tensors="pt")
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
        expected = trained(inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        torch.testing.assert_close(exported(**inputs).logits[real], expected[real], rtol=1e-4, atol=1e-4)
    pairs = [
        (lambda: build_mlm_model(cfg, vocab_size),
         lambda: AutoModelForMaskedLM.from_config(config, trust_remote_code=True)),
        (lambda: build_classifier(cfg, vocab_size, 3),
         lambda: AutoModelForSequenceClassification.from_config(classifier_config, trust_remote_code=True)),
    ]
    for build_ours, build_theirs in pairs:
        torch.manual_seed(0)
        ours = build_ours().eval()
        torch.manual_seed(0)
        theirs = build_theirs().eval()
        theirs_state = {key.removeprefix("crammed."): value for key, value in theirs.state_dict().items()}
        assert theirs_state.keys() == ours.state_dict().keys()
        assert all(torch.equal(theirs_state[key], value) for key, value in ours.state_dict().items())
        with torch.no_grad():
            expected = ours(inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
            assert torch.equal(theirs(**inputs).logits, expected)


def test_the_remote_code_is_the_training_model_file(tmp_path, tokenizer):
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer)), tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    python_files = {path.name for path in (tmp_path / "hf").glob("*.py")}
    model_files = {"crammed_bert.py", "layers.py", "unpadded.py", "initialization.py"}
    assert python_files == model_files | {"configuration_crammed_bert.py", "modeling_crammed_bert.py"}
    for name in python_files:
        assert (tmp_path / "hf" / name).read_text() == (CRAMMING / "model" / name).read_text()


@pytest.mark.parametrize("entry", ["configuration_crammed_bert.py", "modeling_crammed_bert.py"])
def test_each_remote_code_entry_imports_every_model_file_it_needs(entry):
    """transformers 5.0 copies from a local export folder only the files an auto_map entry imports itself,
    not the files those import: an import of an import would be missing there."""
    path = CRAMMING / "model" / entry
    needed = {Path(file).stem for file in get_relative_import_files(path)}
    assert set(get_relative_imports(path)) == needed


def test_a_foreign_tokenizer_auto_map_is_not_carried_into_the_export(tmp_path, tokenizer):
    """Someone's tokenizer_config.json with an auto_map to their remote code (and the code beside it) stays
    behind: the export holds our tokenizer and our model files only."""
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer)), tmp_path / "ckpt", tokenizer)
    config_path = tmp_path / "ckpt" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    config_path.write_text(json.dumps(config))
    (tmp_path / "ckpt" / "evil.py").write_text("raise SystemExit('this must never run')\n")
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    exported = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert "auto_map" not in exported and not (tmp_path / "hf" / "evil.py").exists()
    assert AutoTokenizer.from_pretrained(tmp_path / "hf").convert_tokens_to_ids("[MASK]") == 4


@pytest.mark.parametrize("arch", ["bert-base-tiny", "modern-bert-tiny"])
def test_a_key_no_native_layout_maps_exports_as_remote_code(arch, monkeypatch):
    """A native layout maps or pins the keys it lists; a key outside them (as one added to the model later would
    be) away from its default leaves the layout, instead of being dropped from the export silently."""
    from cramming.model import crammed_bert, export, export_modernbert

    is_layout = export.is_bert_layout if arch.startswith("bert") else export_modernbert.is_modernbert_layout
    cfg = arch_config(arch)
    assert is_layout(cfg)
    # as if no layout mapped dropout
    monkeypatch.setattr(crammed_bert, "NATIVE_LAYOUT_KEYS", crammed_bert.NATIVE_LAYOUT_KEYS - {"dropout"})
    assert is_layout(cfg)  # at its default: nothing is lost
    cfg.dropout = 0.1
    assert not is_layout(cfg)
