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
    run = subprocess.run([sys.executable, "scripts/bench_glue_speed.py", "--glue-dir", str(SHARED_DATA / "glue"),
                          "--examples", "32", "--repeats", "1",
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
    row = re.search(r"^\| `.*corpus\.txt\.gz` \| (\d+) \| ([\d.]+) s \| (\d+) MB \| "
                    r"([\d.]+) s \| (\d+) MB \| ([\d.]+)x \|$",
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
    run = subprocess.run([sys.executable, "scripts/bench_glue_speed.py", "--glue-dir", str(tmp_path),
                          "--device", "cpu"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == (f"error: --glue-dir {tmp_path}: {tmp_path / 'RTE' / 'train.tsv'} not found "
                                  "(a classic GLUE TSV directory)")
    assert run.stdout == ("on the CPU: --examples 200 --repeats 2, to end in minutes (a GPU's 800 x 3 takes over 10 "
                          "minutes here); set them to choose\n")


def test_the_sparse_matmul_benchmark_refuses_a_machine_without_sparse_tensor_cores():
    no_gpu = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # the machine without a GPU, also on a GPU machine
    run = subprocess.run([sys.executable, "scripts/bench_sparse.py"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env=no_gpu)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("error: scripts/bench_sparse.py times torch.sparse's 2:4 kernels, which need an "
                                  "NVIDIA GPU of compute capability 8.0 or later (no CUDA GPU here)")


GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
                "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
TINY_SHAPE = ["--layers", "1", "--hidden", "32", "--heads", "2", "--intermediate", "64", "--vocab", "500"]


@pytest.mark.slow
def test_glue_protocol_projects_every_task_and_the_whole(tmp_path):
    if not (SHARED_DATA / "glue" / "RTE").is_dir():
        pytest.skip("GLUE TSV files not found")
    run = subprocess.run([sys.executable, "scripts/bench_glue_protocol.py", "--glue-dir", str(SHARED_DATA / "glue"),
                          "--steps", "2", "--device", "cpu", *TINY_SHAPE],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    # the CPU's default
    assert "compiled: False, dropout 0.1; 2 steps of 16 a task, medians of 3 timed epochs" in run.stdout
    rows = dict(re.findall(rf"^\| ({'|'.join(GLUE_FOLDERS)}) \| (.*) \|$", run.stdout, re.M))
    assert list(rows) == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]
    present = [name for name in rows if (SHARED_DATA / "glue" / GLUE_FOLDERS[name] / "train.tsv").is_file()]
    for name, cells in rows.items():
        measured = name in present
        assert cells.startswith("2 steps |" if measured else "not measured: the others' mean pace"), (name, cells)
    steps = {name: int(cells.split(" | ")[-2].replace(",", "")) for name, cells in rows.items()}
    assert steps["rte"] == 5 * 156 and steps["mnli"] == 5 * 24_544  # 5 epochs of batches of 16 at the real size
    seconds = [int(cells.split(" | ")[-1].replace(",", "")) for cells in rows.values()]
    total = re.search(r"^whole protocol \(9 tasks, 5 epochs, one seed\): projected ([\d,.]+) minutes", run.stdout, re.M)
    assert total and float(total[1].replace(",", "")) == pytest.approx(sum(seconds) / 60, abs=0.1 + 9 / 60)



@pytest.mark.parametrize("arguments, message", [
    (["--glue-dir", "{tmp}"], "error: --glue-dir {tmp}: {tmp}/RTE/train.tsv not found (a classic GLUE TSV directory)"),
    ([], "error: --glue-dir <folder> is needed: a folder of the classic GLUE TSVs (RTE/train.tsv, ...)"),
    (["--steps", "0"], "error: --steps and --repeats must be at least 1, got 0 and 3"),
    (["--dropout", "1"], "error: --dropout must be in [0, 1), got 1.0"),
    (["--tasks", "rte,boolq"], "error: --tasks rte,boolq: boolq; choose from cola, sst2, mrpc, stsb, qqp, mnli, qnli, "
                               "rte, wnli"),
])
def test_glue_protocol_bad_input_is_one_line(tmp_path, arguments, message):
    arguments = [argument.format(tmp=tmp_path) for argument in arguments]
    run = subprocess.run([sys.executable, "scripts/bench_glue_protocol.py", *arguments, "--device", "cpu"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == message.format(tmp=tmp_path)


def test_the_gpu_glue_speed_script_wants_its_two_folders_and_has_help():
    script = REPO_ROOT / "scripts" / "gpu_glue_speed.sh"
    run = subprocess.run(["bash", str(script), "glue"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == f"error: give the GLUE TSV folder and the output folder (bash {script} --help)"
    help_text = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0
    assert "bash scripts/gpu_glue_speed.sh <GLUE TSV folder> <output folder>" in help_text.stdout
