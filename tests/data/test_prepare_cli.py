"""Real subprocess runs of scripts/prepare_data.py (and, for the variants of its bad input, its main() in this
process)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cramming.data import store
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, TINY_DATA

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
    same bytes in any process (hash-map order inside `tokenizers` can differ between processes)."""
    digests = []
    for cache in ("a", "b"):
        run = prepare("data=embedded", f"cache_dir={tmp_path / cache}")
        assert run.returncode == 0, run.stderr
        (meta,) = (tmp_path / cache / "data").glob("*/meta.json")
        digests.append(json.loads(meta.read_text())["sha256"])
    assert digests[0] == digests[1]
    assert set(digests[0]) == {"rows.bin", "order.npy", "token_counts.npy", "tokenizer.json"}


def test_a_changed_meta_json_is_rebuilt_not_trusted(cache_dir):
    """A meta.json changed after preparation (here a vocab_size that no longer fits the rows, which would make
    pretrain.py die in the embedding with a traceback) fails its own SHA-256, and the dataset is rebuilt."""
    assert prepare("data=embedded").returncode == 0
    (meta_path,) = (cache_dir / "data").glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "vocab_size": 16}, indent=2))
    again = prepare("data=embedded")
    assert again.returncode == 0 and "prepared now" in again.stdout
    assert "meta.json does not match the SHA-256 recorded when it was prepared" in again.stdout + again.stderr
    assert json.loads(meta_path.read_text())["vocab_size"] == meta["vocab_size"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["consistent meta.json", "token_counts.npy"])
def test_any_changed_file_of_a_prepared_dataset_is_rebuilt_before_training(cache_dir, damage):
    """Every file is covered, token_counts.npy too; a meta.json changed along with its own checksum still
    has to fit the rows (every token id below its vocab_size) before training."""
    assert prepare(*TINY_DATA).returncode == 0  # the dataset STEP_RUN trains on
    (directory,) = (path.parent for path in (cache_dir / "data").glob("*/meta.json"))
    if damage == "token_counts.npy":
        counts = np.load(directory / "token_counts.npy")
        np.save(directory / "token_counts.npy", counts[::-1].copy())  # same size, other content
        message = "token_counts.npy does not match the SHA-256 recorded when it was prepared"
    else:
        meta = {**json.loads((directory / "meta.json").read_text()), "vocab_size": 16}
        (directory / "meta.json").write_text(json.dumps({**meta, "meta_sha256": store.meta_sha256(meta)}))
        message = "holds token id"
    run = in_process("pretrain", *STEP_RUN, "train.max_steps=1", f"output_dir={cache_dir.parent / 'runs'}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert message in run.stdout + run.stderr and "rebuilding it" in run.stdout + run.stderr


@pytest.mark.slow
def test_real_gutenberg_shard_with_an_unquoted_glob(cache_dir, gutenberg_valid):
    pattern = str(gutenberg_valid).replace("valid-000", "valid-00[0]")
    run = prepare("data=local", f"data.files={pattern}", "data.tokenizer.vocab_size=8192",
                  "data.tokenizer.train_sample_mb=4")
    assert run.returncode == 0, run.stderr
    assert "11.1 MB read" in run.stdout and "vocabulary 8192" in run.stdout


@pytest.mark.parametrize(
    ("overrides", "message", "real"),
    [  # two cases as real subprocesses, the others through the same main() in this process (tests/commands.py)
        (["data.bogus=1"], "bogus", True),
        (["data=nonexistent"], "nonexistent", False),
        (["data=local"], "data.files", False),
        (["data=local", "data.files=/no/such/file.txt"], "error: data.files: no such file: /no/such/file.txt", True),
        (["data=local", "data.files=/no/such/*.txt"], "error: data.files: '/no/such/*.txt' matches no files", False),
        (["data.tokenizer.kind=magic"], "error: data.tokenizer.kind='magic' is unknown", False),
        (["data.tokenizer.vocab_size=60000"], "error: the tokenizer's training text supports only", False),
    ],
)
def test_bad_input_is_one_clear_line(cache_dir, overrides, message, real):
    run = prepare(*overrides) if real else in_process("prepare_data", *overrides)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr


def test_a_dataset_name_is_one_folder_inside_the_cache(tmp_path):
    run = prepare("data=embedded", "data.name=../../escaped", f"cache_dir={tmp_path / 'cache'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        "error: data.name='../../escaped' names the folder <cache_dir>/data/<data.name>-<key>: it must be 1 "
        "to 128 of the ASCII letters, digits and . _ - +, not starting with a dot")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("pattern", ["corpus.txt", "*.txt"])
def test_a_fifo_as_a_corpus_file_is_named_for_what_it_is(tmp_path, pattern):
    """It exists, so not "no such file"; read, it would wait for a writer forever."""
    os.mkfifo(tmp_path / "corpus.txt")
    run = prepare("data=local", f"data.files={tmp_path / pattern}", f"cache_dir={tmp_path / 'cache'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: data.files: {tmp_path / 'corpus.txt'} is a FIFO (named pipe), not a regular file; give text "
        "files (.txt, .txt.gz, .jsonl, .jsonl.gz, .json, .parquet)")
