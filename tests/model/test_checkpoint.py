"""Checkpoint directories: round trip, classifier from a checkpoint, one-line errors for bad checkpoints."""

import json

import pytest
import torch
from safetensors.torch import load_file

from cramming.errors import CrammingError
from cramming.model import build_mlm_model
from cramming.model.checkpoint import build_classifier_from_pretrained, load_pretrained, save_pretrained

from .conftest import VOCAB_SIZE, arch_config, mlm_batch


@pytest.fixture
def checkpoint(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer))
    save_pretrained(torch.compile(model), tmp_path / "ckpt", tokenizer)  # the compile wrapper is unwrapped
    return tmp_path / "ckpt", model


def test_round_trip(checkpoint, tokenizer):
    directory, model = checkpoint
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in directory.iterdir()}
    assert not any("_orig_mod" in key for key in load_file(directory / "model.safetensors"))
    loaded, loaded_tokenizer = load_pretrained(directory)
    assert not loaded.training and loaded.config == model.config
    assert loaded_tokenizer("abc def").input_ids == tokenizer("abc def").input_ids
    batch = mlm_batch(2, 24, VOCAB_SIZE)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_classifier_from_pretrained(checkpoint, tmp_path, tokenizer):
    directory, model = checkpoint
    classifier, _ = build_classifier_from_pretrained(directory, num_labels=3, dropout=0.1)
    assert classifier.config.dropout == 0.1 and classifier.training
    for key, value in model.bert.state_dict().items():
        assert torch.equal(classifier.bert.state_dict()[key], value), key
    # a saved classifier loads back as a classifier, and gives its encoder to a new head
    save_pretrained(classifier, tmp_path / "classifier", tokenizer)
    loaded, _ = load_pretrained(tmp_path / "classifier")
    ids, mask = torch.randint(5, VOCAB_SIZE, (2, 12)), torch.ones(2, 12, dtype=torch.long)
    classifier.eval()
    torch.testing.assert_close(loaded(ids, mask).logits, classifier(ids, mask).logits, rtol=0, atol=0)
    regressor, _ = build_classifier_from_pretrained(tmp_path / "classifier", num_labels=1)
    assert regressor(ids, mask).logits.shape == (2, 1)
    with pytest.raises(CrammingError, match="num_labels must be a positive integer"):
        build_classifier_from_pretrained(directory, num_labels=0)


def corrupt_weights(directory):
    (directory / "model.safetensors").write_bytes(b"\x00\x01 not a safetensors file")


def wrong_shapes(directory):
    config = json.loads((directory / "config.json").read_text())
    config["arch"]["intermediate_size"] = 256
    (directory / "config.json").write_text(json.dumps(config))


def config_edit(**changes):
    """A damage that sets arch keys (or, vocab_size and num_labels, the top-level ones) in config.json."""
    def edit(directory):
        config = json.loads((directory / "config.json").read_text())
        for key, value in changes.items():
            (config if key in ("vocab_size", "num_labels") else config["arch"])[key] = value
        (directory / "config.json").write_text(json.dumps(config))
    return edit


def unknown_arch_key(directory):
    config = json.loads((directory / "config.json").read_text())
    config["arch"]["rotary"] = True
    (directory / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "model.safetensors").unlink(), "model.safetensors is missing"),
        (corrupt_weights, "model.safetensors is corrupt or unreadable"),
        (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda d: (d / "config.json").unlink(), "config.json is missing"),
        (lambda d: (d / "config.json").write_text("{oops"), "not valid JSON"),
        (wrong_shapes, "do not fit the model of .*config.json: bert.layer.0.ffn.intermediate.weight is "
                       r"\[256, 128\] there \(32,768 values, 131 KB\), \[512, 128\] in the weights"),
        # sizes no weight of the checkpoint could have: refused before the model is built, even on meta
        (config_edit(hidden_size=10**9),
         "config.json sets arch.hidden_size=1000000000, which does not fit the weights in .*safetensors"),
        (config_edit(num_layers=10**9), "config.json: arch.num_layers must be at most 1000, got 1000000000"),
        (config_edit(vocab_size=10**12),
         "config.json sets vocab_size=1000000000000, .*no dimension above 512"),
        (config_edit(num_layers=3),
         "do not fit the model of .*config.json: it has bert.layer.2.attention_norm.weight"),
        (unknown_arch_key, "unknown arch key.*: rotary"),
    ],
)
def test_bad_checkpoint_errors(checkpoint, damage, message):
    directory, _ = checkpoint
    damage(directory)
    for load in (load_pretrained, lambda d: build_classifier_from_pretrained(d, num_labels=2)):
        with pytest.raises(CrammingError, match=message) as error:
            load(directory)
        assert "\n" not in str(error.value)


def test_missing_directory(tmp_path):
    with pytest.raises(CrammingError, match="checkpoint directory not found"):
        load_pretrained(tmp_path / "nowhere")
