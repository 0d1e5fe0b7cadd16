"""Each command as a user runs it prints only our own lines and progress bars: no torchao, torch or
transformers warnings before them (cramming.library_noise), on this CPU build of torch; and transformers
imported after the package, as every command does, says nothing of torchao on a machine with or without CUDA."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval.conftest import GLUE_DIR, make_checkpoint
from tests.eval.test_other_label_count_cli import saved_classifier
from tests.train.runs import NO_PROBE

REPO = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(r"\d+%\|")  # tqdm: "tokenizing: 100%|██████████| 465k/465k ..."
OURS = re.compile(r"^\[[\d\- :,]+\]\[(cramming[\w.]*|HYDRA)\]\[")  # Hydra's default log format, our loggers
# what a library's line looks like where the command logs our messages alone (hydra/job_logging: stdout)
FOREIGN = re.compile(r"site-packages|^[IWEF]\d{4} |Warning|warn\(|LOAD REPORT|^\[transformers\]|Failed to load")


@pytest.mark.parametrize("cuda", [False, True])
def test_transformers_after_the_package_says_only_what_matters_on_this_machine(tmp_path, cuda):
    """torch is told whether CUDA works, so the test holds on any machine: without it nothing is left (a CPU
    build, or a CUDA build without a GPU); with it, only a kernel library of this very Python that failed to
    load, or a missing Triton, would be (torchao's `_C_mxfp8` is built for CPython 3.10 alone)."""
    code = (f"import torch\ntorch.cuda.is_available = lambda: {cuda}\n"
            "import cramming\nfrom transformers import pipeline\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    left = [line for line in done.stderr.splitlines() if line.strip()]
    this_python = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    tags = [re.findall(r"cpython-\d+", line.split(":")[0]) for line in left if line.startswith("Failed to load")]
    if cuda:
        assert all(line.startswith("Failed to load") or "Detected no triton" in line for line in left), left
        assert all(tag in ([], [this_python]) for tag in tags), left
    else:
        assert left == []


def run(script: str, *arguments: str, cwd: Path) -> list[str]:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / script), *arguments], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [line for line in (done.stdout + done.stderr).replace("\r", "\n").splitlines()
            if line.strip() and not PROGRESS.search(line)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE TSV files not found at {GLUE_DIR}")
    lines = (GLUE_DIR / "RTE" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    texts = [text for line in lines if line for text in line.split("\t")[1:3]]
    return make_checkpoint(tmp_path_factory.mktemp("noise") / "checkpoint", texts, vocab_size=1000)


@pytest.mark.slow
def test_pretrain_prints_only_its_own_lines(tmp_path, shared_cache):
    lines = run("pretrain.py", "--config-name", "quickstart", NO_PROBE, "budget=0.0003", f"output_dir={tmp_path}",
                cwd=tmp_path)
    assert [line for line in lines if FOREIGN.search(line)] == []


@pytest.fixture(scope="module")
def exported(tmp_path_factory, checkpoint) -> tuple[Path, list[str]]:
    """The checkpoint exported by scripts/export.py once: where it went, and what the command printed."""
    where = tmp_path_factory.mktemp("exported")
    return where / "hf", run("scripts/export.py", f"ckpt={checkpoint}", f"out={where / 'hf'}", cwd=where)


@pytest.mark.slow
def test_export_prints_only_its_own_lines(exported):
    _, lines = exported
    assert [line for line in lines if FOREIGN.search(line)] == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ours", "exported", "transformers"])
def test_eval_glue_prints_only_its_own_lines(tmp_path, checkpoint, exported, kind):
    ckpt = {"ours": str(checkpoint), "exported": f"hf:{exported[0]}",
            "transformers": f"hf:{saved_classifier(tmp_path / 'bert', 2)}"}[kind]
    lines = run("eval_glue.py", f"ckpt={ckpt}", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}",
                "eval.max_train_examples=16", "eval.epochs=1", f"output_dir={tmp_path / 'glue'}", cwd=tmp_path)
    assert [line for line in lines if not OURS.search(line)] == []
