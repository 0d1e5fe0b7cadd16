"""scripts/compare_runs.py on two real runs: the config key and the package version that differ, the
data, the curves side by side; a directory that is not a run (no config.yaml, no metrics.jsonl) is a
one-line error."""

import json
import subprocess
import sys

import pytest
import torch

from cramming.pretraining import pretrain
from cramming.train.runs import loss_basis
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, compose_config, copy_run, records

COMMAND = [sys.executable, str(REPO_ROOT / "scripts" / "compare_runs.py")]


@pytest.mark.slow
def test_two_runs_differing_in_one_key_and_one_package(shared_cache, tmp_path):
    base = STEP_RUN + ["train.max_steps=3"]
    run_a = pretrain(compose_config(base + [f"output_dir={tmp_path / 'a'}"]))
    run_b = pretrain(compose_config(base + [f"output_dir={tmp_path / 'b'}", "train.optim.lr=5e-4"]))
    summary = json.loads((run_b / "summary.json").read_text())
    summary["provenance"]["packages"]["torch"] = "2.12.0"  # as if B had run in an older environment
    (run_b / "summary.json").write_text(json.dumps(summary))

    shown = subprocess.run([*COMMAND, str(run_a), str(run_b), "--out", str(tmp_path / "both.png")],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "config: 1 key(s) differ" in lines and "  train.optim.lr: 0.001 | 0.0005" in lines
    assert "code and environment: 1 difference(s)" in lines
    assert f"  packages.torch: {torch.__version__} | 2.12.0" in lines
    assert any(line.startswith("data: embedded-") and line.endswith("(the same)") for line in lines)
    curve = lines[lines.index("loss by step: A | B (B - A)") + 1:][:3]
    assert [line.split(":")[0].strip() for line in curve] == ["1", "2", "3"]
    assert (tmp_path / "both.png").is_file()
    by_default = in_process("compare_runs", str(run_a), str(run_b), cwd=tmp_path)  # under outputs/, not here
    (written,) = (tmp_path / "outputs" / "comparisons").glob("*-runs.png")
    assert by_default.stdout.splitlines()[-1] == f"plot: {written.relative_to(tmp_path)}"


def test_a_directory_that_is_not_a_run_is_one_line(tmp_path):
    shown = subprocess.run([*COMMAND, str(tmp_path), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert shown.stderr.strip() == f"error: {tmp_path}: no config.yaml; is it a pretraining run directory?"


def test_a_run_without_metrics_is_one_line_and_one_with_no_step_logged_compares(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("# 2026-01-01 00:00:00\nname: bert\n")  # as record_config writes it
    shown = in_process("compare_runs", str(run), str(run), cwd=tmp_path)
    assert shown.returncode == 2 and "Traceback" not in shown.stdout + shown.stderr and not shown.stdout
    assert shown.stderr.strip() == (f"error: {run}: no metrics.jsonl; is it a pretraining run directory? "
                                    "(a run writes it at its first logged step)")
    (run / "metrics.jsonl").write_text("")  # started, no step logged yet
    shown = in_process("compare_runs", str(run), str(run), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "loss: no step logged by both runs" in shown.stdout.splitlines()


def retruncated(tokenizer: dict) -> dict:
    """The same vocabulary, saved by a run of other row lengths."""
    return tokenizer | {"truncation": {"direction": "Right", "max_length": 512, "strategy": "LongestFirst",
                                       "stride": 0}}


def another_vocabulary(tokenizer: dict) -> dict:
    vocab = tokenizer["model"]["vocab"]
    last = max(vocab, key=vocab.get)
    vocab[f"{last}-renamed"] = vocab.pop(last)
    return tokenizer


def test_losses_of_another_tokenizer_or_mask_rate_are_marked_and_bits_per_character_comes_first(straight_run,
                                                                                                   tmp_path,
                                                                                                   monkeypatch):
    """plot_runs overlaid the losses of a 4,096- and a 32,768-token vocabulary without a word: two copies of one
    run, the second as if trained with another tokenizer and mask rate, both with a zero-shot record."""
    from cramming.train import plots

    figure = plots.comparison_figure
    a, b = copy_run(straight_run, tmp_path / "a"), copy_run(straight_run, tmp_path / "b")
    for run, bits in ((a, 2.5), (b, 2.25)):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        lines[-1] = json.dumps(json.loads(lines[-1]) | {"bits_per_char": bits, "blimp": 55.0})
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    config = (b / "config.yaml").read_text()
    (b / "config.yaml").write_text(config.replace("vocab_size: 4096", "vocab_size: 32768")
                                   .replace("mlm_rate: 0.25", "mlm_rate: 0.15"))
    for run, change in ((a, retruncated), (b, another_vocabulary)):
        tokenizer = run / "checkpoints" / "final" / "tokenizer.json"
        tokenizer.write_text(json.dumps(change(json.loads(tokenizer.read_text()))))
    ids = [loss_basis(run).tokenizer_id[:8] for run in (a, b)]
    why = (f"the MLM losses do not compare: other tokenizers (wordpiece 4096 [{ids[0]}]: {{a}}; wordpiece 32768 "
           f"[{ids[1]}]: {{b}}) and other mask rates (25%: {{a}}; 15%: {{b}}); bits per character does")

    shown = in_process("compare_runs", str(a), str(b), "--out", str(tmp_path / "both.png"))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    first, second = lines[lines.index("loss by step: A | B (B - A)") - 3:][:2]
    assert first.startswith("held-out bits per character: 2.5000") and first.endswith("(-0.2500)")
    assert second.startswith("BLiMP, packaged subset (%)")
    assert lines[lines.index("loss by step: A | B (B - A)") + 1] == f"  ({why.format(a='A', b='B')})"

    plotted = in_process("plot_runs", str(a), str(b), "--out", str(tmp_path / "overlay.png"))
    assert plotted.returncode == 0, plotted.stderr
    assert plotted.stdout.splitlines() == [f"wrote {tmp_path / 'overlay.png'}", f"note: {why.format(a=a, b=b)}"]
    alike = in_process("plot_runs", str(a), str(straight_run), "--out", str(tmp_path / "alike.png"))
    assert alike.stdout.splitlines() == [f"wrote {tmp_path / 'alike.png'}"]  # one vocabulary, one mask rate
    drawn = []
    monkeypatch.setattr(plots, "comparison_figure", lambda runs, note: drawn.append(note) or figure(runs, note))
    plots.plot_comparison([a, b], tmp_path / "again.png")  # as plot_runs and compare_runs draw it
    shown = figure([("a", records(a)), ("b", records(b))], drawn[0])
    assert [axes.get_ylabel() for axes in shown.axes[::2]] == [plots.BITS_LABEL, plots.BLIMP_LABEL, "MLM loss"]
    assert shown.axes[4].get_title().replace("\n", " ") == ("the MLM losses do not compare: other tokenizers and other "
                                                           "mask rates; bits per character does")

