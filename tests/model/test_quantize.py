"""scripts/export.py quantize=int8: torchao's dynamic int8 copy of an export, loaded back by transformers,
and a fine-tuned classifier scored before and after on a GLUE dev split (cramming.model.quantize)."""

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from cramming.model import build_mlm_model
from cramming.model.checkpoint import save_pretrained
from cramming.model.crammed_bert import CrammedForSequenceClassification
from cramming.model.export import export_to_transformers
from tests.model.conftest import VOCAB_SIZE, arch_config
from tests.commands import in_process
from tests.test_bad_inputs import run_command

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


@pytest.fixture
def classifier_export(tmp_path, tokenizer):
    """A (not fine-tuned) RTE-shaped classifier, exported as eval.save_models keeps one."""
    torch.manual_seed(0)
    classifier = CrammedForSequenceClassification(arch_config("crammed-bert-tiny"), VOCAB_SIZE, 2).eval()
    save_pretrained(classifier, tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "fp32")
    return tmp_path / "fp32"


def tiny_rte(root):
    folder = root / "glue" / "RTE"
    folder.mkdir(parents=True)
    rows = [f"{i}\tabc defg hij {i}.\tdefg {'abc' * (i % 3)}.\t{'entailment' if i % 2 else 'not_entailment'}\n"
            for i in range(40)]
    (folder / "train.tsv").write_text(RTE_HEADER + "".join(rows[:20]))
    (folder / "dev.tsv").write_text(RTE_HEADER + "".join(rows[20:]))
    return root / "glue"


def test_int8_copy_loads_in_transformers_and_is_scored_before_and_after(tmp_path, classifier_export):
    out = tmp_path / "int8"
    code, output = run_command("export", f"ckpt={classifier_export}", f"out={out}", "quantize=int8",
                               "quantize_eval_task=rte", f"glue_dir={tiny_rte(tmp_path)}")
    assert code == 0, output
    assert f"wrote the int8 copy of {classifier_export} to {out}" in output
    assert "rte dev, fp32 -> int8: accuracy" in output
    report = json.loads((out / "quantization.json").read_text())
    assert report["quantized_bytes"] < report["fp32_bytes"]
    assert set(report["glue"]["fp32"]["rte"]) == set(report["glue"]["int8"]["rte"]) == {"accuracy"}

    fp32 = AutoModelForSequenceClassification.from_pretrained(classifier_export, trust_remote_code=True).eval()
    int8 = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    assert type(int8.crammed.bert.layer[0].attention.qkv.weight).__name__ == "Int8Tensor"
    assert int8.crammed.bert.embeddings.word_embeddings.weight.dtype == torch.float32  # embeddings stay fp32
    inputs = {"input_ids": torch.randint(5, VOCAB_SIZE, (3, 24)), "attention_mask": torch.ones(3, 24, dtype=torch.long)}
    with torch.no_grad():
        assert torch.allclose(fp32(**inputs).logits, int8(**inputs).logits, atol=0.05)


def test_our_checkpoint_is_exported_then_quantized(tmp_path, classifier_export):
    code, output = run_command("export", f"ckpt={tmp_path / 'ckpt'}", f"out={tmp_path / 'int8'}", "quantize=int8")
    assert code == 0, output
    assert (tmp_path / "int8" / "model.safetensors").is_file() and (tmp_path / "int8" / "tokenizer.json").is_file()


@pytest.mark.parametrize(("args", "words"), [
    (["quantize=int4"], "quantize='int4' must be one of int8 (or null: none)"),
    (["quantize_eval_task=rte"], "quantize_eval_task and glue_dir score a quantized copy: add quantize=int8"),
    (["quantize=int8", "quantize_eval_task=rte", "glue_dir={rte}"], "is not a classifier fine-tuned on it"),
    # found before any export work, not after the int8 copy is written
    (["quantize=int8", "quantize_eval_task=rtee", "glue_dir={rte}"], "unknown GLUE task 'rtee'"),
    (["quantize=int8", "quantize_eval_task=rte", "glue_dir={empty}"], "no data for any requested task"),
    (["quantize=int8", "quantize_eval_task=rte"],
     "glue_dir is null, so rte would be downloaded from the hub, and HF_DATASETS_OFFLINE=1 forbids it: give glue_dir="),
])
def test_bad_quantize_settings_are_one_line(tmp_path, tokenizer, args, words):
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "mlm", tokenizer)
    export_to_transformers(tmp_path / "mlm", tmp_path / "mlm-hf")
    (tmp_path / "empty").mkdir()
    folders = {"rte": tiny_rte(tmp_path), "empty": tmp_path / "empty"}
    code, output = run_command("export", f"ckpt={tmp_path / 'mlm-hf'}", f"out={tmp_path / 'out'}",
                               *[arg.format(**folders) for arg in args])
    assert code == 2 and "Traceback" not in output
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert words in line


def test_a_bad_task_to_score_is_one_line_before_any_export_through_the_command_line(tmp_path, tokenizer):
    """Checked with the settings (ExportConfig.check), so it stops before the export and the int8 copy."""
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "mlm", tokenizer)
    run = in_process("export", f"ckpt={tmp_path / 'mlm'}", f"out={tmp_path / 'out'}", "quantize=int8",
                        "quantize_eval_task=rtee", f"glue_dir={tiny_rte(tmp_path)}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert (run.stderr.startswith("error: unknown GLUE task 'rtee'; known tasks: cola")
            and "did you mean rte?" in run.stderr)
    assert not (tmp_path / "out").exists()


def test_scoring_a_pretraining_checkpoint_is_refused_naming_it_before_any_int8_work(tmp_path, tokenizer):
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "mlm", tokenizer)
    run = in_process("export", f"ckpt={tmp_path / 'mlm'}", f"out={tmp_path / 'out'}", "quantize=int8",
                        "quantize_eval_task=rte", f"glue_dir={tiny_rte(tmp_path)}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: quantize_eval_task=rte: ckpt={tmp_path / 'mlm'} is not a classifier fine-tuned on it but a masked "
        "language model; quantize one kept by eval_glue.py eval.save_models=true "
        "(outputs/glue/<timestamp>/models/<task>-seed0)")  # the checkpoint given, not the temporary export of it
    assert not (tmp_path / "out").exists()
