"""A real run of scripts/export.py, loaded back with transformers' Auto classes."""

import subprocess
import sys

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from cramming.model import build_mlm_model
from cramming.model.checkpoint import save_pretrained
from tests.conftest import REPO_ROOT
from tests.model.conftest import VOCAB_SIZE, arch_config


def test_export_script_writes_a_directory_transformers_loads(tmp_path, tokenizer):
    model = build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE).eval()
    run_dir = tmp_path / "outputs" / "tiny" / "2026-01-01_00-00-00"
    save_pretrained(model, run_dir / "checkpoints" / "final", tokenizer)
    run = subprocess.run(  # ckpt= resolves as for every command: here a run directory, meaning its final
        [sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"ckpt={run_dir}", f"out={tmp_path / 'hf'}"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert f"exported {run_dir / 'checkpoints' / 'final'} to {tmp_path / 'hf'}" in run.stdout
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    inputs = loaded_tokenizer("abc defg hij", return_tensors="pt")
    with torch.no_grad():
        ours = model(inputs["input_ids"]).logits
        theirs = exported(**inputs).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_export_of_a_missing_checkpoint_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"ckpt={tmp_path / 'nope'}", f"out={tmp_path / 'hf'}"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == f"error: ckpt={tmp_path / 'nope'}: no such directory"
