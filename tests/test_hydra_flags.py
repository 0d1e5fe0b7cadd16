"""Hydra's own flags on every command, as a Hydra user types them (real subprocesses): `--cfg job`, `-c job`,
`--cfg hydra|all`, `--resolve`, `--info`, `-m/--multirun`; and the one-line error boundary under each."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENTRY = {"pretrain": "pretrain.py", "eval_glue": "eval_glue.py", "ablate": "scripts/ablate.py",
         "export": "scripts/export.py", "prepare_data": "scripts/prepare_data.py",
         "calculator": "scripts/calculator.py", "benchmark": "scripts/benchmark.py", "gpu_check": "scripts/gpu_check.py"}


def command(name: str, *arguments: str, cwd: Path = REPO, timeout: int = 120) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(REPO / ENTRY[name]), *arguments], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("flags", [["--cfg", "job"], ["-c", "job"], ["--cfg=job"], ["--cfg", "all", "--resolve"],
                                   ["--resolve", "-c", "job"]])
def test_pretrain_prints_its_config_with_hydras_cfg_flag(flags):
    run = command("pretrain", "gpu=2080ti", "budget=24", *flags)
    assert run.returncode == 0, run.stderr
    assert "budget: 24.0" in run.stdout and "name: 2080ti" in run.stdout


@pytest.mark.parametrize(("flags", "expected"), [(["--cfg", "hydra"], "hydra:"), (["--info"], "Config search path"),
                                                 (["--info", "defaults"], "Defaults List"),
                                                 (["--help"], "Powered by Hydra")])
def test_pretrain_answers_hydras_other_flags(flags, expected):
    run = command("pretrain", *flags)
    assert run.returncode == 0, run.stderr
    assert expected in run.stdout


@pytest.mark.parametrize(("name", "overrides"), [
    ("eval_glue", ["ckpt=some/checkpoint"]), ("ablate", ["sweep=smoke"]), ("export", ["ckpt=a", "out=b"]),
    ("prepare_data", []), ("calculator", ["budget=2"]), ("benchmark", []), ("gpu_check", [])])
def test_every_command_prints_its_config_with_c_job(name, overrides):
    run = command(name, "-c", "job", *overrides)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and run.stdout.strip()


@pytest.mark.parametrize(("arguments", "message"), [
    (["--cfg", "job", "train.optim.lrr=1"], "error: unknown key train.optim.lrr — did you mean train.optim.lr?"),
    (["-c", "job", "gpu=tpu"], "error: unknown gpu=tpu; choose one of"),
    (["--info", "all", "budget=abc"], "error: budget=abc: Value 'abc' of type 'str' could not be converted to Float"),
    (["-m", "budget=0.1,abc"], "error: budget=abc: Value 'abc' of type 'str' could not be converted to Float"),
    (["-m", "arch=crammed-bert-tiny,nope"], "error: unknown arch=nope; choose one of bert-base"),
    (["--multirun", "budget=0.1", "train.optim.lrr=1,2"], "error: unknown key train.optim.lrr"),
    (["budget=0.0003,0.0004"], "error: budget=0.0003,0.0004 is a sweep: add -m (--multirun)"),
    (["-m", "--cfg", "job", "budget=1,2"], "error: --multirun and --cfg cannot go together"),
    (["--bogus"], "error: unrecognized arguments: --bogus; see --help"),
    (["--cfg", "jobs"], "error: argument --cfg/-c: invalid choice: 'jobs' (choose from 'job', 'hydra', 'all')"),
])
def test_bad_overrides_end_in_one_line_under_every_flag(arguments, message):
    run = command("pretrain", "--config-name", "quickstart", *arguments)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(message), run.stderr


@pytest.mark.slow
def test_multirun_runs_each_job_in_its_own_numbered_directory_and_ablate_tables_it(tmp_path, cache_dir):
    run = command("pretrain", "--config-name", "quickstart", "-m", "budget=0.0003,0.0004", f"output_dir={tmp_path}",
                  cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert (sweep / "multirun.yaml").is_file()
    for job, budget in (("0", "0.0003"), ("1", "0.0004")):
        (run_dir,) = (sweep / job / "quickstart").iterdir()
        assert (run_dir / "summary.json").is_file() and (run_dir / "checkpoints" / "final").is_dir()
        assert f"budget: {budget}" in (run_dir / "config.yaml").read_text()
    table = command("ablate", f"multirun={sweep}", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert f"Sweep `multirun {sweep.name}`; every run: `--config-name quickstart`." in table.stdout
    assert "| budget=0.0003 | `budget=0.0003` |" in table.stdout and "| budget=0.0004 | `budget=0.0004` |" in table.stdout
    assert (sweep / "ablations.md").is_file() and (sweep / "loss_overlay.png").is_file()


@pytest.mark.parametrize(("arguments", "message"), [
    ([], "error: You must specify 'sweep', e.g, sweep=<OPTION>, or multirun=<a pretrain.py -m directory>"),
    (["sweep=smoke", "multirun=."], "error: sweep=<name> runs a sweep, multirun=<directory> tables a finished one"),
    (["multirun=."], "error: multirun=.: no multirun.yaml"),
])
def test_ablate_needs_a_sweep_or_a_multirun_directory(tmp_path, arguments, message):
    run = command("ablate", *arguments, f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(message), run.stderr


def test_a_job_that_fails_stops_the_sweep_with_one_line(tmp_path):
    run = command("eval_glue", "-m", "ckpt=/nope1,/nope2", f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "error: ckpt=/nope1: no such directory"
