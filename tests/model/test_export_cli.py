"""A real run of scripts/export.py, loaded back with transformers' Auto classes, and its one-line errors (the
upload's as a real process too, the others through its main() in this process: tests/commands.py)."""

import ast
import json
import os
import shlex
import subprocess
import sys

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from cramming.data.vocab import SPECIAL_TOKENS
from cramming.model import build_mlm_model
from cramming.model.checkpoint import save_pretrained
from tests.commands import in_process
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
    glue, fill = [line.removeprefix("next: ").partition("   #")[0] for line in run.stdout.splitlines()
                  if line.startswith("next: ")]  # what to run on it, as commands to copy
    assert glue == f"python eval_glue.py ckpt=hf:{tmp_path / 'hf'}"
    filled = subprocess.run(shlex.split(fill), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert filled.returncode == 0, filled.stderr
    proposed = ast.literal_eval(filled.stdout.strip().splitlines()[-1])  # transformers' own fill-mask pipeline
    assert len(proposed) == 5 and not set(proposed) & set(SPECIAL_TOKENS), proposed
    umask = os.umask(0o022)
    os.umask(umask)
    for folder in (run_dir / "checkpoints" / "final", tmp_path / "hf"):  # safetensors' own files were 0600
        modes = {path.name: oct(path.stat().st_mode & 0o777) for path in folder.iterdir() if path.is_file()}
        assert set(modes.values()) == {oct(0o666 & ~umask)}, modes
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    inputs = loaded_tokenizer("abc defg hij", return_tensors="pt")
    with torch.no_grad():
        ours = model(inputs["input_ids"]).logits
        theirs = exported(**inputs).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_export_of_a_missing_checkpoint_is_one_line(tmp_path):
    run = in_process("export", f"ckpt={tmp_path / 'nope'}", f"out={tmp_path / 'hf'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == f"error: ckpt={tmp_path / 'nope'}: no such directory"


def test_a_config_json_asking_for_an_absurd_model_is_one_line_before_any_allocation(tmp_path, tokenizer):
    """hidden_size 1e9 would be terabytes: the header of model.safetensors says no weight is that wide."""
    checkpoint = tmp_path / "ckpt"
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), checkpoint, tokenizer)
    config = json.loads((checkpoint / "config.json").read_text())
    config["arch"]["hidden_size"] = 1_000_000_000
    (checkpoint / "config.json").write_text(json.dumps(config))
    run = in_process("export", f"ckpt={checkpoint}", f"out={tmp_path / 'hf'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: {checkpoint / 'config.json'} sets arch.hidden_size=1000000000, which does not fit the "
        f"weights in {checkpoint / 'model.safetensors'} (they hold no dimension above 512 (bert.layer.0.ffn."
        "intermediate.weight [512, 128])): the config does not describe these weights (damaged or edited?)")
    assert not (tmp_path / "hf").exists()


def test_push_to_hub_without_a_login_is_one_line_before_any_export(tmp_path, tokenizer, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # where `hf auth login` would keep the token
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "ckpt", tokenizer)
    run = in_process("export", f"ckpt={tmp_path / 'ckpt'}", f"out={tmp_path / 'hf'}", "push_to_hub=someone/my-cram")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip() == ("error: push_to_hub=someone/my-cram: no Hugging Face token (HF_TOKEN, or "
                                  "`hf auth login`): log in first; the export itself needs none")
    assert not (tmp_path / "hf").exists()


def test_push_to_hub_without_network_fails_in_one_line_after_a_complete_export(tmp_path, tokenizer, monkeypatch):
    """Tests run offline (HF_HUB_OFFLINE=1), as a logged-in user without network: the export is written and
    checked, then the upload fails in one line that says how to upload it later."""
    monkeypatch.setenv("HF_TOKEN", "hf_a_token_for_the_test")
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "ckpt", tokenizer)
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"ckpt={tmp_path / 'ckpt'}",
         f"out={tmp_path / 'hf'}", "push_to_hub=someone/my-cram"],
        capture_output=True, text=True, timeout=300,
    )
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert last.startswith("error: push_to_hub=someone/my-cram: the upload failed (")
    assert f"the export in {tmp_path / 'hf'} is complete: upload it later with `hf upload someone/my-cram" in last
    assert AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True) is not None


def test_push_to_hub_uploads_the_checked_folder(tmp_path, tokenizer, monkeypatch, capsys):
    """Up to the network call, with the Hub (which cannot exist here) stood in for by recording HfApi."""
    import huggingface_hub

    from cramming.cli import export

    calls = []
    monkeypatch.setenv("HF_TOKEN", "hf_a_token_for_the_test")

    class Commit:
        commit_url = "https://huggingface.co/someone/my-cram/commit/abc"

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo",
                        lambda self, repo_id, **kw: calls.append(("create", repo_id, kw)))
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder",
                        lambda self, **kw: calls.append(("upload", kw["repo_id"],
                                                         sorted(p.name for p in kw["folder_path"].iterdir())))
                                           or Commit())
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), VOCAB_SIZE), tmp_path / "ckpt", tokenizer)
    monkeypatch.setattr(sys, "argv", ["export", f"ckpt={tmp_path / 'ckpt'}", f"out={tmp_path / 'hf'}",
                                      "push_to_hub=someone/my-cram"])
    export.main()
    assert calls[0] == ("create", "someone/my-cram", {"exist_ok": True})
    assert calls[1][:2] == ("upload", "someone/my-cram")
    model_files = {"crammed_bert.py", "layers.py", "unpadded.py", "initialization.py"}
    assert {"config.json", "model.safetensors", "tokenizer.json", *model_files} <= set(calls[1][2])
    assert "uploaded to https://huggingface.co/someone/my-cram/commit/abc" in capsys.readouterr().out
