"""Every file the project writes and later reads back — run directories, checkpoints, the microbatch cache,
golden files; the dataset cache in tests/data/test_damaged_dataset.py — corrupted, truncated or replaced by the
wrong type: each ends in one
line `error: ...` naming the file, or in a clean rebuild, never a traceback or a silently wrong result.
The commands run through their real entry points in this process (as tests/test_bad_inputs.py does)."""

import json
import shutil
from pathlib import Path

import pytest

from cramming.bench import golden
from cramming.cli import compare_runs
from cramming.errors import CrammingError
from cramming.pretraining import pretrain as pretrain_in_process
from cramming.train.microbatch import CACHE_FILE, cached_search
from tests.test_bad_inputs import COMMANDS, GLUE_DIR, run_command
from tests.train.runs import STEP_RUN, compose_config

COMMANDS.setdefault("compare_runs", compare_runs)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """One real four-step run (its run directory, checkpoints and dataset cache), copied for each damage."""
    root = tmp_path_factory.mktemp("written")
    cache = root / "cache"
    run_dir = pretrain_in_process(compose_config(STEP_RUN + ["train.max_steps=4", "checkpoint.keep_last=8",
                                                             f"output_dir={root / 'runs'}", f"cache_dir={cache}"]))
    return {"root": root, "cache": cache, "run": run_dir}


def damaged_copy(made: dict, tmp_path: Path, name: str, damage) -> Path:
    """A copy of the run under tmp_path/out/t/ with `damage(path of name)` done to it."""
    run_dir = tmp_path / "out" / "t" / made["run"].name
    shutil.copytree(made["run"], run_dir)
    damage(run_dir / name)
    return run_dir


def middle_line(text: str):
    def damage(path: Path) -> None:
        lines = path.read_text().splitlines()
        path.write_text("\n".join([text, *lines[1:]]) + "\n")
    damage.__name__ = "line_1_" + "".join(c for c in text if c.isalnum())
    return damage


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def directory_instead(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.mkdir()


def json_list(path: Path) -> None:
    path.write_text("[1, 2, 3]\n")


def resume(made: dict, tmp_path: Path, run_dir: Path) -> tuple[int, str]:
    return run_command("pretrain", *STEP_RUN, "train.max_steps=4", "checkpoint.keep_last=8",
                       f"output_dir={tmp_path / 'out'}", f"cache_dir={made['cache']}",
                       f"resume={run_dir / 'checkpoints' / 'step-00000002'}")


def evaluate(made: dict, tmp_path: Path, run_dir: Path) -> tuple[int, str]:
    return run_command("eval_glue", f"ckpt={run_dir / 'checkpoints' / 'step-00000002'}", "eval.tasks=[rte]",
                       f"eval.data_dir={GLUE_DIR}", "eval.max_train_examples=8", "eval.epochs=1",
                       f"output_dir={tmp_path / 'glue'}")


def compare(made: dict, tmp_path: Path, run_dir: Path) -> tuple[int, str]:
    return run_command("compare_runs", str(made["run"]), str(run_dir), "--out", str(tmp_path / "comparison.png"))


RUN_FILES = [  # (file in the run directory, damage, command reading it back, what its one line says)
    ("metrics.jsonl", middle_line('{"step": 1, "lo'), resume, "metrics.jsonl, line 1: not a JSON record of a step"),
    ("metrics.jsonl", middle_line("[1, 2]"), resume, "metrics.jsonl, line 1: not a JSON record of a step"),
    ("metrics.jsonl", middle_line('{"loss": 3.0}'), compare, "metrics.jsonl, line 1: not a JSON record of a step"),
    ("metrics.jsonl", directory_instead, resume, "metrics.jsonl: Is a directory"),
    ("summary.json", truncate, compare, "summary.json is corrupt"),
    ("summary.json", json_list, compare, "summary.json holds a JSON list, not an object"),
    ("checkpoints/step-00000002/trainer_state.pt", truncate, resume, "trainer_state.pt"),
    ("checkpoints/step-00000002/trainer_state.pt", directory_instead, resume, "trainer_state.pt"),
    ("checkpoints/step-00000002/config.json", truncate, evaluate, "config.json"),
    ("checkpoints/step-00000002/config.json", json_list, evaluate, "config.json"),
    ("checkpoints/step-00000002/model.safetensors", directory_instead, resume, "model.safetensors"),
]


@pytest.mark.parametrize(("name", "damage", "command", "message"), RUN_FILES,
                         ids=[f"{case[0]}-{case[1].__name__}-{case[2].__name__}" for case in RUN_FILES])
def test_a_damaged_file_of_a_run_is_one_line(made, tmp_path, name, damage, command, message):
    run_dir = damaged_copy(made, tmp_path, name, damage)
    code, output = command(made, tmp_path, run_dir)
    assert code == 2 and "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, last


@pytest.mark.parametrize("damage", [truncate, json_list], ids=lambda d: d.__name__)
def test_a_damaged_heartbeat_charges_nothing_and_the_resume_goes_on(made, tmp_path, damage):
    """heartbeat.json is rewritten every few seconds: a damaged one is treated as absent (nothing charged)."""
    run_dir = damaged_copy(made, tmp_path, "heartbeat.json", damage)
    code, output = resume(made, tmp_path, run_dir)
    assert code == 0 and "Traceback" not in output, output
    assert json.loads((run_dir / "summary.json").read_text())["lost_to_crashes_s"] == 0


def test_a_directory_where_the_heartbeat_goes_is_one_line_naming_it(made, tmp_path):
    run_dir = damaged_copy(made, tmp_path, "heartbeat.json", directory_instead)
    code, output = resume(made, tmp_path, run_dir)
    assert code == 2 and "Traceback" not in output, output
    assert output.strip().splitlines()[-1] == f"error: cannot use {run_dir / 'heartbeat.json'}: Is a directory"


@pytest.mark.parametrize("content", ["{", "[1, 2]", '{"key": {"microbatch_size": "many"}}', '{"key": 7}'])
def test_a_damaged_microbatch_cache_is_searched_again_and_rewritten(tmp_path, content):
    """The cache is reached on a GPU only; its reading and rewriting are the same code here."""
    (tmp_path / CACHE_FILE).write_text(content)
    assert cached_search(tmp_path, "key", lambda: (48, [])) == (48, "search")
    assert cached_search(tmp_path, "key", lambda: (1, [])) == (48, "cache")


@pytest.mark.parametrize("content", ["", '{"final_loss": 2.', "[]", "7"])
def test_a_damaged_golden_file_is_one_line_naming_it(tmp_path, content):
    (tmp_path / golden.PRETRAIN_FILE).write_text(content)
    with pytest.raises(CrammingError, match=str(tmp_path / golden.PRETRAIN_FILE)):
        golden.read(tmp_path, golden.PRETRAIN_FILE)
