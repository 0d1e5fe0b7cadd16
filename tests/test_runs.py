"""One resolver for `resume=` and `ckpt=`: a checkpoint dir, a run dir, a directory of runs, or latest; and a
run's config.yaml, which keeps every config the run trained with."""

import os
from pathlib import Path

import pytest

from cramming.errors import CrammingError
from cramming.files import folder_name
from cramming.train.runs import (STATE_FILE, WEIGHTS_FILE, comparison_path, new_run_dir, record_config,
                                 resolve_checkpoint, run_config, run_configs, run_of)
from tests.commands import in_process


def checkpoint(directory: Path, age: float = 0.0, state: bool = True) -> Path:
    """A checkpoint directory whose weights were written at 1e9 + age (seconds since the epoch)."""
    directory.mkdir(parents=True)
    for name in (WEIGHTS_FILE, STATE_FILE) if state else (WEIGHTS_FILE,):
        (directory / name).write_bytes(b"")
    os.utime(directory / WEIGHTS_FILE, (1e9 + age, 1e9 + age))
    return directory


def test_a_checkpoint_dir_is_used_as_given(tmp_path):
    given = checkpoint(tmp_path / "ckpt")
    assert resolve_checkpoint(str(given), tmp_path, key="ckpt") == given


def test_a_run_dir_means_its_final_else_its_highest_step(tmp_path):
    run = tmp_path / "outputs" / "tiny" / "2024-01-01_00-00-00"
    checkpoint(run / "checkpoints" / "step-00000900")
    checkpoint(run / "checkpoints" / "step-00001000")
    checkpoint(run / "checkpoints" / "900")  # a step number at the end of the name is enough
    assert resolve_checkpoint(str(run), tmp_path, key="ckpt") == run / "checkpoints" / "step-00001000"
    (run / "checkpoints" / ".final.tmp").mkdir()  # a write in progress never counts
    (run / "checkpoints" / ".final.tmp" / WEIGHTS_FILE).write_bytes(b"")
    assert resolve_checkpoint(str(run), tmp_path, key="ckpt") == run / "checkpoints" / "step-00001000"
    checkpoint(run / "checkpoints" / "final")
    assert resolve_checkpoint(str(run), tmp_path, key="ckpt") == run / "checkpoints" / "final"


def test_latest_is_the_run_that_wrote_its_checkpoint_last(tmp_path):
    outputs = tmp_path / "outputs"
    earlier = checkpoint(outputs / "a" / "2024-01-02_00-00-00" / "checkpoints" / "final", age=0)
    later = checkpoint(outputs / "b" / "2024-01-01_00-00-00" / "checkpoints" / "final", age=100)
    (outputs / "b" / "2024-01-03_00-00-00").mkdir()  # started, killed before its first checkpoint
    (outputs / "glue" / "2024-01-04_00-00-00").mkdir(parents=True)  # not a pretraining run
    assert resolve_checkpoint("latest", outputs, key="ckpt") == later  # eval_glue: every run under outputs/
    assert resolve_checkpoint("latest", outputs / "a", key="resume") == earlier  # resume: the runs of one name
    assert resolve_checkpoint(str(outputs / "a"), outputs, key="ckpt") == earlier  # a directory of runs


def test_latest_skips_a_newer_run_with_only_a_checkpoint_being_written(tmp_path):
    complete = checkpoint(tmp_path / "a" / "2024-01-01_00-00-00" / "checkpoints" / "step-00000004", age=0)
    partial = checkpoint(tmp_path / "a" / "2024-01-02_00-00-00" / "checkpoints" / ".step-00000001.tmp", age=100)
    assert partial.exists() and resolve_checkpoint("latest", tmp_path, key="ckpt") == complete


def test_resume_needs_the_trainer_state(tmp_path):
    run = tmp_path / "exp" / "2026-01-01_00-00-00"
    with_state = checkpoint(run / "checkpoints" / "step-00000005")
    checkpoint(run / "checkpoints" / "final", state=False)  # weights only: enough to evaluate, not to resume
    assert resolve_checkpoint(str(run), tmp_path, key="ckpt") == run / "checkpoints" / "final"
    assert resolve_checkpoint(str(run), tmp_path, key="resume", need_state=True) == with_state
    assert resolve_checkpoint("latest", tmp_path / "exp", key="resume", need_state=True) == with_state


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(CrammingError, match=r"^ckpt=.*absent: no such directory$"):
        resolve_checkpoint(str(tmp_path / "absent"), tmp_path, key="ckpt")
    with pytest.raises(CrammingError, match=r"^ckpt=.*: not a complete checkpoint \(model.safetensors\), nor a run"):
        resolve_checkpoint(str(tmp_path), tmp_path, key="ckpt")
    with pytest.raises(CrammingError, match=r"^resume=latest: no run with a complete checkpoint \(model.safetensors "
                                            r"and trainer_state.pt\) under "):
        resolve_checkpoint("latest", tmp_path, key="resume", need_state=True)
    run = tmp_path / "run"
    (run / "checkpoints" / ".step-00000001.tmp").mkdir(parents=True)
    with pytest.raises(CrammingError, match="this run has no complete checkpoint"):
        resolve_checkpoint(str(run), tmp_path, key="ckpt")


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path):
    first, second = new_run_dir(tmp_path, "x"), new_run_dir(tmp_path, "x")
    assert first != second and first.is_dir() and second.is_dir() and second.name.startswith(first.name)


def test_config_yaml_keeps_every_config_the_run_trained_with(tmp_path):
    run = tmp_path / "t" / "2026-01-01_00-00-00"
    run.mkdir(parents=True)
    record_config(run, {"budget": 0.02, "resume": None, "train": {"optim": {"lr": 0.001}}})
    record_config(run, {"budget": 0.04, "resume": "x/checkpoints/final", "train": {"optim": {"lr": 0.0005}}})
    text = (run / "config.yaml").read_text()
    assert text.count("\n---\n") == 1 and text.startswith("# 20")  # each document headed by its time
    assert [config.budget for config in run_configs(run)] == [0.02, 0.04]
    assert run_config(run).train.optim.lr == 0.0005  # the config it trained with last
    elsewhere = tmp_path / "u" / "2026-01-02_00-00-00"  # a run resumed into a new directory: its history too
    elsewhere.mkdir(parents=True)
    record_config(elsewhere, {"budget": 0.06, "resume": "a"}, earlier_run=run)
    assert [config.budget for config in run_configs(elsewhere)] == [0.02, 0.04, 0.06]


@pytest.mark.parametrize(("text", "words"), [("budget: [0.02\n", "while parsing"),
                                             ("- a\n- b\n", "not a run's config")])
def test_a_damaged_config_yaml_is_one_line(tmp_path, text, words):
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(CrammingError, match=f"^cannot read {tmp_path / 'config.yaml'}: .*{words}"):
        run_configs(tmp_path)
    with pytest.raises(CrammingError, match="no config.yaml; is it a pretraining run directory"):
        run_config(tmp_path / "absent")


def test_a_checkpoint_knows_its_run_and_comparisons_go_under_outputs(tmp_path):
    assert run_of(tmp_path / "run" / "checkpoints" / "final") == tmp_path / "run"
    assert run_of(tmp_path / "ckpt") is None  # a checkpoint directory on its own
    path = comparison_path("loss")
    assert path.parent == Path("outputs") / "comparisons" and path.name.endswith("-loss.png")


NAME_RULE = "it must be 1 to 128 of the ASCII letters, digits and . _ - +, not starting with a dot"


@pytest.mark.parametrize("name", ["../../escaped_run", "a/b", "'a\nb'"], ids=["dot-dot", "slash", "newline"])
def test_a_run_name_is_one_folder_inside_output_dir(tmp_path, name):
    """A name that would leave output_dir, nest folders or hold a newline: one line, and nothing written."""
    run = in_process("pretrain", "data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", f"name={name}",
                     "output_dir=out/inner", f"cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    shown = repr(name.strip("'"))
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: name={shown} names the folder <output_dir>/<name>/<timestamp>: {NAME_RULE}")
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # no run directory, no prepared data


def test_a_safe_name_is_accepted():
    assert folder_name("name", "ablation-lr_2+x.1", "<output_dir>/<name>")[0]
    for bad in ("", ".", "..", ".hidden", "a/b", "a\\b", "a b", "é", "a\n", "x" * 129, None):
        assert not folder_name("name", bad, "<output_dir>/<name>")[0], bad
