"""`scripts/zero_shot.py` as a user runs it: a real subprocess on a tiny checkpoint and real BLiMP files, `latest`
and run directories, and its one-line errors (exit 2) through the commands' error boundary."""

import json
import re
import shutil

import pytest

from tests.commands import in_process, in_subprocess

from .test_pll import PARADIGMS, blimp_dir  # noqa: F401  (the fixture: a folder of a few real paradigms)

TEXT = "The cats sleep in the sun.\nA dog barked at the senators who were reconsidering everything.\n"


@pytest.mark.slow
def test_zero_shot_scores_a_checkpoint_on_blimp_and_bits_per_character(rte_checkpoint, blimp_dir, tmp_path):
    (tmp_path / "held_out.txt").write_text(TEXT)
    run = in_subprocess("zero_shot", f"ckpt={rte_checkpoint}", f"blimp_dir={blimp_dir}", "pairs_per_paradigm=5",
                        f"text_file={tmp_path / 'held_out.txt'}", f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "out" / "zero_shot_results.json").read_text())
    blimp = results["blimp"]
    assert set(blimp["paradigms"]) == set(PARADIGMS) and blimp["pairs"] == 15 and blimp["method"] == "pll-word-l2r"
    assert blimp["overall"] == pytest.approx(sum(blimp["paradigms"].values()) / 3)
    assert set(blimp["fields"]) == {"morphology", "syntax", "syntax_semantics"}
    assert results["bits"]["characters"] == len(TEXT.replace("\n", "")) and results["bits"]["bits_per_char"] > 0
    assert "glue_score" not in results  # reported apart from GLUE
    report = (tmp_path / "out" / "zero_shot_results.md").read_text()
    for row in ("**this checkpoint**", "5-gram (published)", "LSTM (published)", "GPT-2 (published)",
                "human (published)"):
        assert row in report


def test_latest_and_a_run_directory_name_the_runs_checkpoint(rte_checkpoint, blimp_dir, tmp_path):
    run_dir = tmp_path / "runs" / "tiny" / "2026-01-01_00-00-00"
    shutil.copytree(rte_checkpoint, run_dir / "checkpoints" / "final")
    for ckpt in ("latest", str(run_dir)):
        out = tmp_path / f"out-{len(ckpt)}"
        run = in_process("zero_shot", f"ckpt={ckpt}", f"runs_dir={tmp_path / 'runs'}", f"blimp_dir={blimp_dir}",
                         "pairs_per_paradigm=2", "method=pll", f"output_dir={out}")
        assert run.returncode == 0, run.stderr
        results = json.loads((out / "zero_shot_results.json").read_text())
        assert results["checkpoint"] == str(run_dir / "checkpoints" / "final")
        assert results["blimp"]["method"] == "pll" and results["blimp"]["pairs"] == 6
        assert results["bits"] is None and "no text_file" in results["bits_skipped"]


@pytest.mark.parametrize("overrides, message", [
    (["ckpt={root}/nope"], "error: ckpt={root}/nope: no such directory"),
    (["ckpt=latest", "runs_dir={root}"], "error: ckpt=latest: no run with a complete checkpoint"),
    (["ckpt={ckpt}", "method=mlm"], "error: method='mlm' must be one of pll-word-l2r, pll"),
    (["ckpt={ckpt}", "pairs_per_paradigm=0"], "error: pairs_per_paradigm=0 must be at least 1"),
    (["ckpt={ckpt}", "batch_size=0"], "error: batch_size=0 must be at least 1"),
    (["ckpt={ckpt}", "blimp_dir={root}/none"], "error: blimp_dir={root}/none: no such folder"),
    (["ckpt={ckpt}", "blimp_dir={root}"], "error: blimp_dir={root}: no .jsonl or .jsonl.gz files in it"),
    (["ckpt={ckpt}", "blimp_dir={blimp}", "text_file={root}/none.txt"],
     "error: text_file={root}/none.txt: cannot read it"),
    (["ckpt={ckpt}", "text_file=a.txt", "bits_rows=8"], "error: bits_rows counts the run's held-out rows"),
    (["ckpt=hf:{root}/none", "blimp_dir={blimp}"], "error: ckpt=hf:{root}/none: no such folder"),
    (["ckpt=hf:{ckpt}", "blimp_dir={blimp}"], "error: ckpt=hf:{ckpt}: this is one of our checkpoints"),
    (["ckpt={ckpt}", "pairs_per_paradigmm=3"],
     "error: unknown key pairs_per_paradigmm — did you mean pairs_per_paradigm?"),
])
def test_bad_input_ends_in_one_line(rte_checkpoint, blimp_dir, tmp_path, overrides, message):
    values = {"root": tmp_path, "ckpt": rte_checkpoint, "blimp": blimp_dir}
    run = in_process("zero_shot", *(o.format(**values) for o in overrides), f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(**values)), run.stderr


def test_a_classifier_checkpoint_is_refused(rte_checkpoint, blimp_dir, tmp_path):
    from cramming.model.checkpoint import build_classifier_from_pretrained, save_pretrained

    classifier, tokenizer = build_classifier_from_pretrained(rte_checkpoint, num_labels=2)
    save_pretrained(classifier, tmp_path / "classifier", tokenizer)
    run = in_process("zero_shot", f"ckpt={tmp_path / 'classifier'}", f"blimp_dir={blimp_dir}",
                     f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2 and "zero-shot scoring needs a masked LM" in run.stderr


def test_time_blimp_times_a_checkpoint_without_writing_anything(rte_checkpoint, blimp_dir, tmp_path, monkeypatch):
    """What a benchmark (the GPU check) calls for the time of the whole of BLiMP; here a few pairs."""
    from cramming.eval.zero_shot import time_blimp

    monkeypatch.chdir(tmp_path)
    result = time_blimp(str(rte_checkpoint), str(blimp_dir), device="cpu", pairs_per_paradigm=3)
    assert result["pairs"] == 9 and result["rows"] > 9 and result["seconds"] > 0
    # seconds is rounded to the millisecond, rows_per_s to a tenth: a fast machine's few milliseconds leave room
    low, high = result["seconds"] - 0.0005, result["seconds"] + 0.0005
    assert result["rows"] / high - 0.05 <= result["rows_per_s"] <= result["rows"] / max(low, 1e-9) + 0.05
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_run_keeps_each_paradigm_it_scored_marked_partial(rte_checkpoint, blimp_dir, tmp_path,
                                                                          monkeypatch):
    """Stopped (Ctrl-C) while scoring the second of three paradigms: the reports hold the first, say so, and the
    command ends as interrupted commands do (exit 130, one line)."""
    from cramming.eval import zero_shot

    scored = []

    def second_is_interrupted(*args, **kwargs):
        scored.append(args[1][0].uid)
        if len(scored) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    real = zero_shot.score_blimp
    monkeypatch.setattr(zero_shot, "score_blimp", second_is_interrupted)
    monkeypatch.setattr("cramming.phase_progress.EVERY_S", 0.0)  # a progress line at every batch
    out = tmp_path / "out"
    run = in_process("zero_shot", f"ckpt={rte_checkpoint}", f"blimp_dir={blimp_dir}", "pairs_per_paradigm=2",
                     f"output_dir={out}")
    assert run.returncode == 130 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "interrupted: stopped before it finished"
    results = json.loads((out / "zero_shot_results.json").read_text())
    assert results["partial"] == "BLiMP: 1 of 3 paradigms scored" and list(results["blimp"]["paradigms"]) == scored[:1]
    assert results["blimp"]["pairs"] == 2 and set(results["published"]["5-gram"]["fields"]) == {
        results["blimp"]["fields"].popitem()[0]}
    assert "**Partial, stopped before the end**: BLiMP: 1 of 3 paradigms scored." in (
        out / "zero_shot_results.md").read_text()
    assert re.search(r"BLiMP: \d+% \([\d,]+ of [\d,]+ masked rows\)", run.stdout)  # the progress lines
    assert "stopped: kept what was scored (BLiMP: 1 of 3 paradigms scored)" in run.stdout + run.stderr
