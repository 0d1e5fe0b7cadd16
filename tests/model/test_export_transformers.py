"""What users call on any transformers encoder, on our remote-code export, in the installed transformers:
every Auto class, hidden states and attentions, embeddings, resizing, gradient checkpointing, the attention
implementations, bf16 loading, a save/load round trip and the pipelines. (Other versions:
scripts/check_export.sh.)"""

import json

import pytest
import torch
from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForMultipleChoice, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer,
                          BertConfig, pipeline)

from cramming.model import build_mlm_model
from cramming.model.checkpoint import save_pretrained
from cramming.model.crammed_bert import never_special
from cramming.model.export import export_to_transformers

from .conftest import arch_config

LAYERS, HIDDEN, HEADS = 2, 128, 4  # crammed-bert-tiny


@pytest.fixture(scope="module")
def export(tmp_path_factory, tokenizer):
    """A trained-looking crammed-bert-tiny export (random weights, fixed seed) and the model it came from."""
    root = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    model = build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer)).eval()
    save_pretrained(model, root / "ckpt", tokenizer)
    export_to_transformers(root / "ckpt", root / "hf")
    return root / "hf", model


@pytest.fixture(scope="module")
def inputs(tokenizer):
    batch = tokenizer(["abc def ghij", "ab cd ef gh ij kl mn op"], padding=True, return_tensors="pt")
    assert batch["attention_mask"].min() == 0  # padded
    return batch


def load(auto_class, directory, **kwargs):
    return auto_class.from_pretrained(directory, trust_remote_code=True, **kwargs).eval()


@torch.no_grad()
def test_every_auto_class_loads_the_encoder_and_gives_its_outputs(export, inputs):
    directory, model = export
    B, T = inputs["input_ids"].shape
    encoder = load(AutoModel, directory)
    hidden = encoder(**inputs).last_hidden_state
    torch.testing.assert_close(hidden, model.bert(inputs["input_ids"], inputs["attention_mask"]))
    assert type(encoder).__name__ == "CrammedBertModel"

    shapes = {
        AutoModelForMaskedLM: lambda out: out.logits.shape == (B, T, len(AutoTokenizer.from_pretrained(directory))),
        AutoModelForSequenceClassification: lambda out: out.logits.shape == (B, 3),
        AutoModelForTokenClassification: lambda out: out.logits.shape == (B, T, 3),
        AutoModelForQuestionAnswering: lambda out: out.start_logits.shape == out.end_logits.shape == (B, T),
    }
    for auto_class, right_shape in shapes.items():
        task_model = load(auto_class, directory, num_labels=3)
        assert torch.equal(task_model.get_input_embeddings().weight, model.bert.embeddings.word_embeddings.weight)
        out = task_model(**inputs)
        assert right_shape(out) and all(torch.isfinite(value).all() for value in out.values()), auto_class

    choices = load(AutoModelForMultipleChoice, directory)
    stacked = {key: value[None].expand(3, -1, -1) for key, value in inputs.items()}  # (3 questions, B choices, T)
    out = choices(**stacked, labels=torch.tensor([0, 1, 0]))
    assert out.logits.shape == (3, B) and out.loss.ndim == 0


def test_task_heads_learn(export, inputs):
    """The loss of every new head is wired to its outputs: one gradient step on one batch lowers it."""
    directory, _ = export
    T = inputs["input_ids"].size(1)
    cases = [
        (AutoModelForTokenClassification, {"labels": torch.where(inputs["attention_mask"] == 1, 1, -100)}),
        (AutoModelForQuestionAnswering,
         {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([2, 5])}),
        (AutoModelForSequenceClassification, {"labels": torch.tensor([0, 1])}),
    ]
    for auto_class, labels in cases:
        torch.manual_seed(0)
        task_model = load(auto_class, directory, num_labels=2).train()
        optimizer = torch.optim.SGD(task_model.parameters(), lr=0.1)
        losses = []
        for _ in range(2):
            loss = task_model(**inputs, **labels).loss
            losses.append(loss.item())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        assert losses[1] < losses[0], (auto_class, losses, T)


@torch.no_grad()
def test_hidden_states_and_attentions(export, inputs):
    directory, _ = export
    B, T = inputs["input_ids"].shape
    mlm = load(AutoModelForMaskedLM, directory)
    plain = mlm(**inputs).logits
    out = mlm(**inputs, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == LAYERS + 1 and all(h.shape == (B, T, HIDDEN) for h in out.hidden_states)
    assert len(out.attentions) == LAYERS and all(a.shape == (B, HEADS, T, T) for a in out.attentions)
    for probabilities in out.attentions:
        torch.testing.assert_close(probabilities.sum(-1), torch.ones(B, HEADS, T))
        assert probabilities[0, :, :, inputs["attention_mask"][0] == 0].abs().max() == 0  # padding gets none
    torch.testing.assert_close(out.logits, plain, rtol=1e-5, atol=1e-5)  # the eager path computes the same
    encoder_out = load(AutoModel, directory)(**inputs, output_hidden_states=True)
    torch.testing.assert_close(encoder_out.hidden_states[-1], encoder_out.last_hidden_state)
    assert isinstance(load(AutoModel, directory)(**inputs, return_dict=False), tuple)


@torch.no_grad()
def test_attention_implementations_and_bf16_loading(export, inputs):
    directory, _ = export
    logits = {}
    for implementation in ("eager", "sdpa"):
        mlm = load(AutoModelForMaskedLM, directory, attn_implementation=implementation)
        assert mlm.config._attn_implementation == implementation
        logits[implementation] = mlm(**inputs).logits
    torch.testing.assert_close(logits["eager"], logits["sdpa"], rtol=1e-5, atol=1e-5)
    half = load(AutoModelForMaskedLM, directory, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    out = half(**inputs).logits
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), logits["sdpa"], rtol=0.1, atol=0.1)


def test_gradient_checkpointing_gives_the_same_gradients(export, inputs):
    directory, _ = export
    gradients = []
    for checkpointing in (False, True):
        mlm = load(AutoModelForMaskedLM, directory).train()
        if checkpointing:
            mlm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            assert mlm.crammed.bert.gradient_checkpointing
        mlm(**inputs, labels=inputs["input_ids"]).loss.backward()
        gradients.append(torch.cat([p.grad.flatten() for p in mlm.parameters()]))
    torch.testing.assert_close(gradients[0], gradients[1])


@torch.no_grad()
def test_embeddings_can_be_swapped_and_resized(export, inputs, tmp_path):
    directory, _ = export
    mlm = load(AutoModelForMaskedLM, directory)
    vocab = mlm.config.vocab_size
    mlm.resize_token_embeddings(vocab + 8)
    assert mlm.config.vocab_size == vocab + 8 and mlm(**inputs).logits.shape[-1] == vocab + 8
    replacement = torch.nn.Embedding(vocab + 8, HIDDEN)
    mlm.set_input_embeddings(replacement)
    assert mlm.get_input_embeddings() is replacement
    torch.testing.assert_close(mlm(**inputs).logits[0, 0], never_special(mlm.crammed.cls(  # a prediction's logits
        mlm.crammed.bert(inputs["input_ids"], inputs["attention_mask"])[0, 0], replacement.weight)))  # decoder tied

    mlm.save_pretrained(tmp_path / "resaved")
    again = AutoModelForMaskedLM.from_pretrained(tmp_path / "resaved", trust_remote_code=True).eval()
    torch.testing.assert_close(again(**inputs).logits, mlm(**inputs).logits)


def test_the_tokenizer_class_exists_in_transformers_4_and_5(export):
    directory, _ = export
    assert json.loads((directory / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((directory / "config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_pipelines(export):
    directory, _ = export
    fill = pipeline("fill-mask", model=str(directory), trust_remote_code=True, top_k=3)
    candidates = fill("abc [MASK] ghij")
    assert len(candidates) == 3 and all("[MASK]" not in c["sequence"] for c in candidates)
    assert candidates[0]["score"] >= candidates[1]["score"] >= candidates[2]["score"]
    features = pipeline("feature-extraction", model=str(directory), trust_remote_code=True)
    tokens = len(AutoTokenizer.from_pretrained(directory)("abc def")["input_ids"])
    assert torch.tensor(features("abc def")).shape == (1, tokens, HIDDEN)


def test_native_bert_export_keeps_the_dropout_it_trained_with(tmp_path, tokenizer):
    model = build_mlm_model(arch_config("bert-base-tiny", "dropout=0.1"), len(tokenizer))
    save_pretrained(model, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "hf")
    config = BertConfig.from_pretrained(tmp_path / "hf")
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1
    assert config.layer_norm_eps == model.config.norm_eps and config.hidden_act == "gelu"


def test_the_version_check_passes_here_and_catches_a_difference(tmp_path, capsys):
    """scripts/check_export.sh runs `check` in other transformers versions; here, in the installed one."""
    from cramming.model.export_check import check, make

    make(tmp_path)
    assert check(tmp_path) == 0 and "same outputs" in capsys.readouterr().out
    reference = torch.load(tmp_path / "reference.pt")
    reference["mlm_logits"][0, 0, -1] += 1e-3  # a word's (a special token's is the lowest float, unmoved by it)
    torch.save(reference, tmp_path / "reference.pt")
    assert check(tmp_path) == 1 and "mlm_logits: max |difference| 1.00e-03" in capsys.readouterr().out
