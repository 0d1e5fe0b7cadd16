"""The comparison benchmarks run end to end at toy size (GLUE fine-tuning padded vs unpadded, and
corpus preparation vs bare tokenizers encoding), or refuse in one line (2:4 sparse matmuls off a GPU)."""

import gzip
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, SHARED_DATA


def rounded_ratio_fits(ratio: float, top: float, bottom: float, rate_step: float, ratio_step: float) -> bool:
    """Whether a printed ratio can be top / bottom, each of the three printed to its step (at any speed)."""
    low = (top - rate_step / 2) / (bottom + rate_step / 2)
    high = (top + rate_step / 2) / (bottom - rate_step / 2) if bottom > rate_step / 2 else float("inf")
    return low - ratio_step / 2 <= ratio <= high + ratio_step / 2


@pytest.mark.slow
def test_glue_speed_compares_padded_and_unpadded(tmp_path):
    if not (SHARED_DATA / "glue" / "RTE").is_dir():
        pytest.skip("GLUE TSV files not found")
    run = subprocess.run([sys.executable, "scripts/bench_glue_speed.py", "--examples", "32", "--repeats", "1",
                          "--layers", "1", "--hidden", "32", "--heads", "2", "--intermediate", "64", "--vocab", "500"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for task in ("rte", "mrpc"):
        for part in ("train", "eval"):
            line = re.search(rf"^{task} {part}: padded (\d+) examples/s, unpadded (\d+) examples/s, ([\d.]+)x$",
                             run.stdout, re.M)
            assert line, run.stdout
            # the rates are printed to whole examples/s and the ratio to 0.01, whatever the machine's speed
            assert rounded_ratio_fits(float(line[3]), int(line[2]), int(line[1]), rate_step=1.0, ratio_step=0.01)


def test_prepare_benchmark_prints_the_ratio_to_bare_encoding(tmp_path, cache_dir):
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt") as handle:
        for book in range(40):
            handle.write("\n".join(f"Line {line} of book {book}, with words enough to count." for line in range(200)))
            handle.write("\n\n")
    run = subprocess.run([sys.executable, "scripts/bench_prepare.py", "--files", str(corpus),
                          "--set", "data.tokenizer.vocab_size=200"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    row = re.search(r"^\| `.*corpus\.txt\.gz` \| (\d+) \| ([\d.]+) s \| (\d+) MB \| ([\d.]+) s \| (\d+) MB \| ([\d.]+)x \|$",
                    run.stdout, re.M)
    assert row, run.stdout
    prepare_s, bare_s, ratio = float(row[2]), float(row[4]), float(row[6])
    assert rounded_ratio_fits(ratio, prepare_s, bare_s, rate_step=0.1, ratio_step=0.01)  # walls shown to 0.1 s
    assert int(row[3]) > 0 and int(row[5]) > 0  # peak RSS of each process


def test_prepare_benchmark_refuses_a_pattern_without_files(tmp_path):
    run = subprocess.run([sys.executable, "scripts/bench_prepare.py", "--files", str(tmp_path / "none-*.gz")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.strip() == f"error: no files match {tmp_path / 'none-*.gz'}"
    assert "Traceback" not in run.stderr


def test_glue_speed_without_the_tsv_files_is_one_line_and_on_a_cpu_it_says_its_cpu_sizes(tmp_path):
    """With its defaults on a CPU (800 examples a task, 3 repeats) it ran past 10 minutes without a word."""
    run = subprocess.run([sys.executable, "scripts/bench_glue_speed.py", "--glue-dir", str(tmp_path), "--device", "cpu"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == f"error: --glue-dir {tmp_path}: {tmp_path / 'RTE' / 'train.tsv'} not found (a classic GLUE TSV directory)"
    assert run.stdout == ("on the CPU: --examples 200 --repeats 2, to end in minutes (a GPU's 800 x 3 takes over 10 "
                          "minutes here); set them to choose\n")


def test_the_sparse_matmul_benchmark_refuses_a_machine_without_sparse_tensor_cores():
    no_gpu = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # the machine without a GPU, also on a GPU machine
    run = subprocess.run([sys.executable, "scripts/bench_sparse.py"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env=no_gpu)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("error: scripts/bench_sparse.py times torch.sparse's 2:4 kernels, which need an NVIDIA "
                                  "GPU of compute capability 8.0 or later (no CUDA GPU here)")
