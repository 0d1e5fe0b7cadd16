"""Parameter-efficient GLUE (`eval.peft=lora`): LoRA through peft on real RTE data and a real tiny checkpoint;
only LoRA and the head train, the report keeps the protocol apart, bad settings are one-line errors."""

import json
import math

import pytest
import torch
from torch import nn

from cramming.eval.batching import subset
from cramming.eval.config import protocol_deviations
from cramming.eval.encoders import open_encoder
from cramming.eval.finetune import finetune, predict
from cramming.eval.parameter_efficient import LoraSettings, merged, record
from cramming.eval.report import write_reports
from cramming.eval.run import run_glue
from cramming.eval.tasks.registry import GlueConfig, task_named
from cramming.engine.precision import Precision
from tests.test_bad_inputs import run_command

from .conftest import GLUE_DIR
from .test_any_encoder import bert_folder  # noqa: F401 (a fixture: a small transformers BERT folder)
from .test_report import _results

LORA = LoraSettings(rank=8, alpha=8.0, dropout=0.0, target_modules=None)
CPU = torch.device("cpu")
FP32 = Precision.resolve("fp32", CPU, "eval.precision")
OUR_LAYERS = ["attention.qkv", "attention.dense", "ffn.intermediate", "ffn.output"]


def _expected_counts(encoder, rank: int) -> dict[str, int]:
    """What LoRA of rank r implies for the plain classifier: r (in + out) per adapted Linear layer (A is
    (r, in), B is (out, r)), plus the whole fresh head."""
    plain = encoder.classifier(2, 0.1, 0)
    lora = sum(rank * (m.in_features + m.out_features) for name, m in plain.named_modules()
               if isinstance(m, nn.Linear) and not name.startswith("head."))
    head = sum(p.numel() for name, p in plain.named_parameters() if name.startswith("head."))
    return {"trainable": lora + head, "total": sum(p.numel() for p in plain.parameters()) + lora, "lora": lora}


def test_lora_fine_tunes_rte_end_to_end(rte_checkpoint, tmp_path):
    cfg = {"tasks": ["rte"], "data_dir": str(GLUE_DIR), "max_train_examples": 64, "epochs": 1, "peft": "lora",
           "save_models": True}
    results = run_glue(cfg, rte_checkpoint, tmp_path)

    assert results["protocol"] == "LoRA r=8"
    assert results["peft"] | {"reference": None} == {
        "method": "lora", "rank": 8, "alpha": 8.0, "dropout": 0.0, "target_modules": None, "label": "LoRA r=8",
        "adapted_layers": OUR_LAYERS, "reference": None}
    rte = results["tasks"]["rte"]
    assert rte["parameters"] == _expected_counts(open_encoder(str(rte_checkpoint), 0.1), rank=8)
    assert math.isfinite(rte["seeds"]["0"][0]["train_loss"])
    assert 0 <= results["scores"]["rte"]["accuracy"] <= 100
    assert results["protocol_deviations"]["peft"] == {
        "protocol": None, "used": "LoRA (rank 8, alpha 8, dropout 0, on every Linear layer of the encoder)"}
    assert json.loads((tmp_path / "glue_results.json").read_text())["protocol"] == "LoRA r=8"

    report = (tmp_path / "glue_results.md").read_text()
    assert "| **this checkpoint (LoRA r=8)** | –/– | – | – |" in report
    ours, full = report.index("**Protocol: LoRA r=8**"), report.index("**Protocol: full fine-tuning**")
    assert ours < report.index("| **this checkpoint (LoRA r=8)**") < full < report.index("| BERT-base, fully trained")
    trainable, total = rte["parameters"]["trainable"], rte["parameters"]["total"]
    assert f"Trainable parameters: rte {trainable:,} of {total:,}" in report

    # The saved model has LoRA folded into its weights (the next test checks its outputs): a plain classifier.
    from transformers import AutoModelForSequenceClassification

    saved = AutoModelForSequenceClassification.from_pretrained(tmp_path / "models" / "rte-seed0",
                                                               trust_remote_code=True)
    assert not any("lora" in name for name, _ in saved.named_parameters())


def test_only_lora_and_the_head_change_and_merging_keeps_the_outputs(rte_checkpoint):
    encoder = open_encoder(str(rte_checkpoint), 0.1)
    classifier = encoder.classifier(2, 0.1, seed=0, lora=LORA)
    before = {name: p.detach().clone() for name, p in classifier.named_parameters()}
    trainable = {name for name, p in classifier.named_parameters() if p.requires_grad}
    assert all("lora_" in name or ".head." in name for name in trainable)
    assert sum(before[name].numel() for name in trainable) == _expected_counts(encoder, rank=8)["trainable"]

    rte = task_named("rte")()
    data = rte.load(str(GLUE_DIR), 0.001)
    train = subset(rte.encode(data.train, encoder.tokenizer, 128), 32)
    cfg = GlueConfig(lr=1e-3, epochs=1, warmup_fraction=0.0)
    history = finetune(classifier, train, {}, cfg, CPU, FP32, 0, encoder.tokenizer.pad_token_id, "rte", rte.score)
    assert math.isfinite(history[0]["train_loss"])

    after = dict(classifier.named_parameters())
    frozen = [name for name in before if name not in trainable]
    assert frozen and all(torch.equal(before[name], after[name]) for name in frozen)  # every base weight as loaded
    assert all(not torch.equal(before[name], after[name]) for name in trainable)  # LoRA's A and B, the head
    assert all(before[name].abs().max() == 0 for name in trainable if "lora_B" in name)  # B starts at zero

    # What eval.save_models saves: each B A folded into its weight, the same outputs without peft's layers.
    dev = subset(rte.encode(data.evaluations["rte"], encoder.tokenizer, 128), 32)
    outputs = predict(classifier, dev, "rte", 16, CPU, FP32, encoder.tokenizer.pad_token_id)
    plain = merged(classifier)
    assert type(plain).__name__ == "CrammedForSequenceClassification" and "lora" not in str(plain)
    torch.testing.assert_close(predict(plain, dev, "rte", 16, CPU, FP32, encoder.tokenizer.pad_token_id), outputs,
                               rtol=1e-4, atol=1e-5)


def test_a_transformers_bert_gets_lora_on_its_encoder_layers(bert_folder):  # noqa: F811 (the fixture)
    encoder = open_encoder(f"hf:{bert_folder}", 0.1)
    model = encoder.classifier(2, 0.1, seed=0, lora=LORA)
    assert record(LORA, model)["adapted_layers"] == [
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
        "intermediate.dense", "output.dense"]
    trained = {name for name, p in model.named_parameters() if p.requires_grad and "lora_" not in name}
    # the fresh head of a BertForMaskedLM checkpoint: pooler and classifier
    assert {name.removeprefix("base_model.model.") for name in trained} == {
        "bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight", "classifier.bias"}
    chosen = encoder.classifier(2, 0.1, seed=0, lora=LoraSettings(4, 8.0, 0.0, ("query", "value")))
    assert record(LORA, chosen)["adapted_layers"] == ["attention.self.query", "attention.self.value"]


def test_full_fine_tuning_is_the_default_and_records_its_parameters(rte_checkpoint, tmp_path):
    assert GlueConfig().peft is None and protocol_deviations(GlueConfig()) == {}
    results = run_glue({"tasks": ["rte"], "data_dir": str(GLUE_DIR), "max_train_examples": 16, "epochs": 1},
                       rte_checkpoint, tmp_path)
    assert results["protocol"] == "full fine-tuning" and results["peft"] is None
    counts, lora = results["tasks"]["rte"]["parameters"], _expected_counts(open_encoder(str(rte_checkpoint), 0.1), 8)
    assert counts == {"trainable": lora["total"] - lora["lora"], "total": lora["total"] - lora["lora"]}


def test_a_lora_baseline_gets_a_table_of_its_own(tmp_path):
    results = _results()
    results["baseline"] = {"checkpoint": "earlier", "protocol": "LoRA r=4", "scores": {"rte": {"accuracy": 60.0}},
                           "glue_score": 60.0, "glue_score_over": ["rte"]}
    write_reports(results, tmp_path)
    report = (tmp_path / "glue_results.md").read_text()
    full, lora = report.index("**Protocol: full fine-tuning**"), report.index("**Protocol: LoRA r=4**")
    assert full < report.index("| **this checkpoint** |") < report.index("| BERT-base, fully trained") < lora
    assert lora < report.index("| baseline: `earlier` (LoRA r=4) | –/– | – | – | 60.0 |")
    assert "scores and averages do not compare across tables" in report


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.peft=adapter"], "eval.peft='adapter' is unknown; choose null (full fine-tuning) or lora"),
        (["eval.peft_rank=8"], "eval.peft_rank=8 is set but eval.peft is null (full fine-tuning)"),
        (["eval.peft_target_modules=[qkv]"], "eval.peft_target_modules=['qkv'] is set but eval.peft is null"),
        (["eval.peft=lora", "eval.peft_rank=0"], "eval.peft_rank must be at least 1, got 0"),
        (["eval.peft=lora", "eval.peft_rank=eight"], "eval.peft_rank=eight: Value 'eight' of type 'str' could not"),
        (["eval.peft=lora", "eval.peft_alpha=0"], "eval.peft_alpha must be positive and finite, got 0.0"),
        (["eval.peft=lora", "eval.peft_dropout=1"], "eval.peft_dropout must be in [0, 1), got 1.0"),
        (["eval.peft=lora", "eval.peft_target_modules=[]"], "eval.peft_target_modules=[] must name Linear layers"),
        (["eval.peft=lora", "eval.peft_target_modules=[query]"], "eval.peft_target_modules: 'query' names no Linear "
         "layer of the encoder; choose among attention.qkv, attention.dense, ffn.intermediate, ffn.output"),
        (["eval.peft=lora", "eval.peft_target_modules=[dense]"], "eval.peft_target_modules: 'dense' matches "
         "head.dense, part of the fresh classification head (which trains fully)"),
    ],
)
def test_bad_peft_settings_are_one_line_errors(rte_checkpoint, tmp_path, overrides, message):
    code, output = run_command("eval_glue", f"ckpt={rte_checkpoint}", f"output_dir={tmp_path}", *overrides)
    assert code == 2 and "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert errors == [errors[0]] and errors[0].startswith(f"error: {message}")
