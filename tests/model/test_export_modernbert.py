"""A model of ModernBERT's layout exports as transformers' own ModernBERT classes: loaded with no remote code,
with our logits within 1e-5 (fp32, CPU) on padded batches at T=128 and T=512, for the masked-LM and for a
fine-tuned classifier (both poolings). A layout with no native class keeps the remote-code export."""

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification, pipeline

from cramming.model import build_mlm_model
from cramming.model.checkpoint import build_classifier_from_pretrained, save_pretrained
from cramming.model.export import export_to_transformers

from .conftest import arch_config
from .test_export import never_special_in_fill_mask

LENGTHS = {128: [128, 70, 9], 512: [512, 300, 131, 17]}  # real tokens per row, right-padded


def trained_looking(model):
    """Every weight moved off its initialization (zero biases, unit norms), as training leaves them."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model.eval()


def padded_batch(T: int, vocab_size: int) -> dict[str, torch.Tensor]:
    lengths = LENGTHS[T]
    generator = torch.Generator().manual_seed(T)
    input_ids = torch.randint(5, vocab_size, (len(lengths), T), generator=generator)
    attention_mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()
    input_ids[attention_mask == 0] = 0  # [PAD]
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@pytest.fixture(scope="module")
def mlm_export(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("modernbert")
    torch.manual_seed(0)
    model = trained_looking(build_mlm_model(arch_config("modern-bert-tiny"), len(tokenizer)))
    save_pretrained(model, root / "ckpt", tokenizer)
    export_to_transformers(root / "ckpt", root / "hf")
    return root, model


def test_the_export_is_transformers_own_modernbert(mlm_export):
    root, model = mlm_export
    folder = root / "hf"
    assert not list(folder.glob("*.py"))  # no remote code
    saved = json.loads((folder / "config.json").read_text())
    assert saved["model_type"] == "modernbert" and "auto_map" not in saved
    config = AutoConfig.from_pretrained(folder)
    assert type(config).__name__ == "ModernBertConfig"
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    assert (config.local_attention, config.sliding_window) == (128, 64)
    assert config.rope_parameters["full_attention"]["rope_theta"] == 160_000.0
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert (config.intermediate_size, config.norm_eps) == (192, 1e-5)  # one GeGLU half
    assert (config.norm_bias, config.decoder_bias) == (False, True)
    assert (config.attention_bias, config.mlp_bias, config.classifier_bias) == (False, False, False)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id) == (0, 2, 3)
    mlm = AutoModelForMaskedLM.from_pretrained(folder)
    assert type(mlm).__name__ == "ModernBertForMaskedLM"
    assert mlm.decoder.weight.data_ptr() == mlm.model.embeddings.tok_embeddings.weight.data_ptr()  # tied


@pytest.mark.parametrize("T", [128, 512])
def test_masked_lm_logits_equal_ours_on_padded_batches(mlm_export, tokenizer, T):
    root, model = mlm_export
    batch = padded_batch(T, len(tokenizer))
    real = batch["attention_mask"].bool()
    theirs = AutoModelForMaskedLM.from_pretrained(root / "hf").eval()
    with torch.no_grad():
        ours = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        exported = theirs(**batch).logits
    torch.testing.assert_close(exported[real], ours[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_fine_tuned_classifier_exports_with_our_logits(mlm_export, tokenizer, tmp_path, pooling):
    root, _ = mlm_export
    checkpoint = root / "ckpt"
    if pooling == "mean":  # the same encoder, pretrained with the other pooling set
        config = json.loads((checkpoint / "config.json").read_text())
        config["arch"]["classifier_pooling"] = "mean"
        checkpoint = tmp_path / "mean"
        checkpoint.mkdir()
        for path in (root / "ckpt").iterdir():
            (checkpoint / path.name).write_bytes(path.read_bytes())
        (checkpoint / "config.json").write_text(json.dumps(config))
    classifier, _ = build_classifier_from_pretrained(checkpoint, num_labels=3)
    classifier = trained_looking(classifier)  # a fine-tuned head: every one of its weights counts
    save_pretrained(classifier, tmp_path / "classifier", tokenizer)
    export_to_transformers(tmp_path / "classifier", tmp_path / "hf")
    theirs = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == "ModernBertForSequenceClassification"
    assert theirs.config.classifier_pooling == pooling and theirs.config.classifier_dropout == 0.1
    for T in (128, 512):
        batch = padded_batch(T, len(tokenizer))
        with torch.no_grad():
            ours = classifier(batch["input_ids"], batch["attention_mask"]).logits
            torch.testing.assert_close(theirs(**batch).logits, ours, rtol=0, atol=1e-5)


def test_fill_mask_and_a_new_classifier_without_remote_code(mlm_export):
    root, _ = mlm_export
    fill = pipeline("fill-mask", model=str(root / "hf"), top_k=3)
    candidates = fill("abc [MASK] ghij")
    assert len(candidates) == 3 and candidates[0]["score"] >= candidates[2]["score"]
    never_special_in_fill_mask(root / "hf", fill.tokenizer.vocab_size)
    fresh = AutoModelForSequenceClassification.from_pretrained(root / "hf", num_labels=2)  # encoder + a new head
    inputs = fill.tokenizer(["abc def", "ab cd ef gh"], padding=True, return_tensors="pt")
    assert fresh(**inputs).logits.shape == (2, 2)


def test_a_layout_without_a_native_class_keeps_the_remote_code(tmp_path, tokenizer):
    """modern-bert with sinusoidal positions is no ModernBERT: remote code, sliding windows included."""
    torch.manual_seed(0)
    model = trained_looking(build_mlm_model(arch_config("modern-bert-tiny", "positions=scaled-sinusoidal"),
                                            len(tokenizer)))
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    batch = padded_batch(128, len(tokenizer))
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    for implementation in ("sdpa", "eager"):  # eager: the attention probabilities written out, windows too
        theirs = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True,
                                                      attn_implementation=implementation).eval()
        assert type(theirs).__name__ == "CrammedBertForMaskedLM"
        with torch.no_grad():
            torch.testing.assert_close(theirs(**batch).logits[real], ours[real], rtol=1e-4, atol=1e-4)
