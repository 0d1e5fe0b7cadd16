"""Real subprocess runs of scripts/prepare_data.py."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "prepare_data.py"


def prepare(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *overrides], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )


def dataset_line(run: subprocess.CompletedProcess) -> str:
    return next(line for line in run.stdout.splitlines() if line.startswith("dataset "))


def test_embedded_then_cache_hit(cache_dir):
    first = prepare("data=embedded")
    assert first.returncode == 0, first.stderr
    assert "prepared now" in first.stdout and "MB/s" in first.stdout
    second = prepare("data=embedded")
    assert second.returncode == 0 and "reused from cache" in second.stdout
    assert dataset_line(first) == dataset_line(second)  # the same dataset directory


def test_two_preparations_in_two_processes_give_the_same_dataset(tmp_path):
    """Tokenizer training, packing and ordering are deterministic: the same corpus and settings give the
    same bytes in any process (hash-map order inside `tokenizers` once made every tokenizer different)."""
    digests = []
    for cache in ("a", "b"):
        run = prepare("data=embedded", f"cache_dir={tmp_path / cache}")
        assert run.returncode == 0, run.stderr
        (meta,) = (tmp_path / cache / "data").glob("*/meta.json")
        digests.append(json.loads(meta.read_text())["sha256"])
    assert digests[0] == digests[1] and set(digests[0]) == {"rows.bin", "order.npy", "tokenizer.json"}


def test_real_gutenberg_shard_with_an_unquoted_glob(cache_dir, gutenberg_valid):
    pattern = str(gutenberg_valid).replace("valid-000", "valid-00[0]")
    run = prepare("data=local", f"data.files={pattern}", "data.tokenizer.vocab_size=8192",
                  "data.tokenizer.train_sample_mb=4")
    assert run.returncode == 0, run.stderr
    assert "11.1 MB read" in run.stdout and "vocabulary 8192" in run.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.bogus=1"], "bogus"),
        (["data=nonexistent"], "nonexistent"),
        (["data=local"], "data.files"),
        (["data=local", "data.files=/no/such/file.txt"], "error: data.files: no such file: /no/such/file.txt"),
        (["data=local", "data.files=/no/such/*.txt"], "error: data.files: '/no/such/*.txt' matches no files"),
        (["data.tokenizer.kind=magic"], "error: data.tokenizer.kind='magic' is unknown"),
        (["data.tokenizer.vocab_size=60000"], "error: the tokenizer's training text supports only"),
    ],
)
def test_bad_input_is_one_clear_line(cache_dir, overrides, message):
    run = prepare(*overrides)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr
