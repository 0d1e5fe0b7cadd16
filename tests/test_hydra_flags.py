"""Hydra's own flags on every command, as a Hydra user types them: `--cfg job`, `-c job`, `--cfg hydra|all`,
`--resolve`, `--info`, `-m/--multirun`, `--help`; the one-line error boundary under each; and the config groups
each command has (a group it does not have, or a choice that is not one, is one line). Each flag family runs
once as a real subprocess; its other variants run the same main() in this process (tests/commands.py)."""

import importlib

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.hydra import Hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from cramming import CONFIG_DIR
from cramming.cli.groups import config_groups
from cramming.cli.run_mode import mode_of
from tests.commands import SCRIPTS, in_process, in_subprocess
from tests.train.runs import NO_PROBE

def command(name: str, *arguments: str, real: bool = False, **where):
    return (in_subprocess if real else in_process)(name, *arguments, **where)


@pytest.mark.parametrize(("flags", "real"), [(["--cfg", "job"], True), (["-c", "job"], False), (["--cfg=job"], False),
                                            (["--cfg", "all", "--resolve"], True), (["--resolve", "-c", "job"], False)])
def test_pretrain_prints_its_config_with_hydras_cfg_flag(flags, real):
    run = command("pretrain", "gpu=2080ti", "budget=24", *flags, real=real)
    assert run.returncode == 0, run.stderr
    assert "budget: 24.0" in run.stdout and "name: 2080ti" in run.stdout


@pytest.mark.parametrize(("arguments", "name"), [([], "crammed-bert"), (["arch=bert-base-tiny"], "bert-base-tiny"),
                                                 (["--config-name", "quickstart", "arch=bert-base"], "quickstart")])
def test_the_default_run_name_follows_the_arch(arguments, name):
    run = command("pretrain", *arguments, "-c", "job", "--resolve")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"name: {name}\n")  # runs go to <output_dir>/<name>/<timestamp>


@pytest.mark.parametrize(("flags", "expected", "real"), [
    (["--cfg", "hydra"], "hydra:", False), (["--info"], "Config search path", True),
    (["--info", "defaults"], "Defaults List", False), (["--help"], "Powered by Hydra", True)])
def test_pretrain_answers_hydras_other_flags(flags, expected, real):
    run = command("pretrain", *flags, real=real)
    assert run.returncode == 0, run.stderr
    assert expected in run.stdout


@pytest.mark.parametrize(("name", "overrides"), [
    ("eval_glue", ["ckpt=some/checkpoint"]), ("ablate", ["sweep=smoke"]), ("export", ["ckpt=a", "out=b"]),
    ("prepare_data", []), ("calculator", ["budget=2"]), ("benchmark", []), ("gpu_check", [])])
def test_every_command_prints_its_config_with_c_job(name, overrides):
    run = command(name, "-c", "job", *overrides)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and run.stdout.strip()


@pytest.mark.parametrize(("arguments", "message", "real"), [
    (["--cfg", "job", "train.optim.lrr=1"], "error: unknown key train.optim.lrr — did you mean train.optim.lr?", True),
    (["-c", "job", "gpu=tpu"], "error: unknown gpu=tpu; choose one of", False),
    (["--info", "all", "budget=abc"], "error: budget=abc: Value 'abc' of type 'str' could not be converted to Float",
     False),
    (["-m", "budget=0.1,abc"], "error: budget=abc: Value 'abc' of type 'str' could not be converted to Float", True),
    (["-m", "arch=crammed-bert-tiny,nope"], "error: unknown arch=nope; choose one of bert-base", False),
    (["--multirun", "budget=0.1", "train.optim.lrr=1,2"], "error: unknown key train.optim.lrr", False),
    (["budget=0.0003,0.0004"], "error: budget=0.0003,0.0004 is a sweep: add -m (--multirun)", False),
    (["-m", "--cfg", "job", "budget=1,2"], "error: --multirun and --cfg cannot go together", False),
    (["--bogus"], "error: unrecognized arguments: --bogus; see --help", False),
    (["budget=0.01", "-m", "name=x"], "error: unrecognized arguments: name=x: -m comes after other overrides, and "
                                      "Hydra reads the overrides as one group: put -m before the overrides or after "
                                      "them all; see --help", True),
    (["--cfg", "jobs"], "error: argument --cfg/-c: invalid choice: 'jobs' (choose from 'job', 'hydra', 'all')", False),
])
def test_bad_overrides_end_in_one_line_under_every_flag(arguments, message, real):
    run = command("pretrain", "--config-name", "quickstart", *arguments, real=real)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(message), run.stderr


@pytest.mark.slow
def test_multirun_runs_each_job_in_its_own_numbered_directory_and_ablate_tables_it(tmp_path, shared_cache):
    run = command("pretrain", "-m", "--config-name", "quickstart", NO_PROBE, "budget=0.0003,0.0004",
                  f"output_dir={tmp_path}", real=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert (sweep / "multirun.yaml").is_file()
    for job, budget in (("0", "0.0003"), ("1", "0.0004")):
        (run_dir,) = (sweep / job / "quickstart").iterdir()
        assert (run_dir / "summary.json").is_file() and (run_dir / "checkpoints" / "final").is_dir()
        assert f"budget: {budget}" in (run_dir / "config.yaml").read_text()
    assert (run.stdout + run.stderr).count(f"next: python scripts/ablate.py multirun={sweep}   #") == 2  # each job
    table = command("ablate", f"multirun={sweep}", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert f"Sweep `multirun {sweep.name}`; every run: `--config-name quickstart {NO_PROBE}`." in table.stdout
    assert ("| budget=0.0003 | `budget=0.0003` |" in table.stdout
            and "| budget=0.0004 | `budget=0.0004` |" in table.stdout)
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


def test_a_job_that_fails_is_said_and_the_sweep_goes_on(tmp_path):
    """Each failed job in a line as it fails, the next job still run, and one closing line naming them all."""
    run = command("eval_glue", "-m", "ckpt=/nope1,/nope2", f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-3:] == [
        "error: job 0 failed: ckpt=/nope1: no such directory", "error: job 1 failed: ckpt=/nope2: no such directory",
        "error: 2 of the sweep's 2 jobs failed (each job ran): job 0: ckpt=/nope1: no such directory; job 1: "
        "ckpt=/nope2: no such directory"]


PRETRAIN_GROUPS = "its groups: arch, data, train, optim, gpu, eval, wandb"


def group_options(group: str) -> str:
    """The options of a config group, as Hydra lists them: its files (a new choice needs no edit here)."""
    return ", ".join(sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml")))


@pytest.mark.parametrize(("name", "arguments", "message", "real"), [
    ("pretrain", ["optim=lionn"],
     f"error: unknown optim=lionn; choose one of {group_options('optim')} — did you mean lion?", True),
    ("pretrain", ["+optim=lion"], "error: +optim=lion: optim is a group of pretrain.py already; choose with optim=lion",
     False),
    ("pretrain", ["sweep=smoke"], f"error: sweep=smoke: pretrain.py has no config group sweep ({PRETRAIN_GROUPS}); "
                                  "sweep is a group of scripts/ablate.py: python scripts/ablate.py sweep=smoke", False),
    ("pretrain", ["arch=schema"], f"error: unknown arch=schema; choose one of {group_options('arch')}", False),
    ("pretrain", ["+arch=bert-base"], "error: +arch=bert-base: arch is a group of pretrain.py already; choose with "
                                      "arch=bert-base", False),
    ("pretrain", ["eval=null"], "error: eval=null: leave a group out with ~eval, or choose one of glue, race, "
                                "superglue", False),
    ("eval_glue", ["ckpt=x", "arch=bert-base"], "error: arch=bert-base: eval_glue.py has no config group arch (its "
                                                "groups: eval); here the model is the checkpoint's (ckpt=); arch is a "
                                                "group of pretrain.py and scripts/benchmark.py: python pretrain.py "
                                                "arch=bert-base", True),
    ("export", ["ckpt=a", "out=b", "train=quick"], "error: train=quick: scripts/export.py has no config group train "
                                                   "(it has none); here the model is the checkpoint's (ckpt=); train "
                                                   "is a group of pretrain.py: python pretrain.py train=quick", False),
    ("ablate", ["optim=lion"], "error: optim=lion: scripts/ablate.py has no config group optim (its groups: sweep); "
                               "optim is a group of pretrain.py: python pretrain.py optim=lion", False),
])
def test_a_group_the_command_does_not_have_is_one_line(name, arguments, message, real, tmp_path):
    quickstart = ["--config-name", "quickstart", NO_PROBE] if name == "pretrain" else []
    run = command(name, *quickstart, *arguments, real=real, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and run.stderr.strip() == message
    assert not list(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize(("name", "arguments", "groups"), [
    ("pretrain", [], [f"{group}: {group_options(group)}"
                      for group in ("arch", "data", "train", "optim", "gpu", "eval", "wandb")]),
    ("eval_glue", [], [f"eval: {group_options('eval')}"]),
    ("ablate", [], [f"sweep: {group_options('sweep')}"]),
    ("export", [], ["(none: every setting is a key of the config below)"]),
])
def test_help_lists_only_the_groups_and_options_a_command_has(name, arguments, groups):
    run = command(name, "--help", *arguments)
    assert run.returncode == 0, run.stderr
    section = run.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert [line for line in section.splitlines()[2:] if line.strip()] == groups


def test_the_groups_of_every_command_are_those_hydra_composes():
    commands = [path.stem for path in CONFIG_DIR.glob("*.yaml")]
    assert set(commands) == {*SCRIPTS, "quickstart"} - {"plot_runs", "compare_runs", "launch"}  # the Hydra apps
    for name in SCRIPTS:  # each command module registers its schemas
        importlib.import_module(f"cramming.cli.{name}")
    for name in commands:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            choices = compose(name, return_hydra_config=True).hydra.runtime.choices
        assert set(config_groups(name)) == {group for group in choices if not group.startswith("hydra/")}, name
        assert choices["hydra/help"] == "cramming", name  # --help lists these, not every folder of configs/


def test_the_run_mode_read_from_the_command_line_is_what_hydras_composition_reads():
    """Hydra.get_mode composes a command's whole config to read hydra.mode; none of ours sets it, so the overrides
    alone say it (cramming.cli.run_mode), for every command."""
    for name in SCRIPTS:
        importlib.import_module(f"cramming.cli.{name}")
    for name in [path.stem for path in CONFIG_DIR.glob("*.yaml")]:
        for overrides in ([], ["hydra.mode=RUN"], ["hydra.mode=MULTIRUN"], ["hydra.mode=RUN", "hydra.mode=MULTIRUN"],
                          ["hydra.mode='MULTIRUN'"], ["hydra.mode=SOMETIMES"], ["hydra.mode=[RUN]"]):
            with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
                composed = GlobalHydra.instance().hydra.get_mode(name, list(overrides))
            assert composed == mode_of(overrides), (name, overrides)
    assert mode_of(["hydra.mode=MULTIRUN"]) == RunMode.MULTIRUN and mode_of(["budget=1"]) is None


def test_a_command_composes_its_config_twice_the_checks_and_the_run(monkeypatch, tmp_path):
    """Not a third time for Hydra's run mode: a command's start pays for each composition (0.2-0.4 s on a CPU)."""
    runs = []
    compose_config = Hydra.compose_config
    monkeypatch.setattr(Hydra, "compose_config", lambda hydra, *args, **kwargs: (
        runs.append(kwargs.get("run_mode")), compose_config(hydra, *args, **kwargs))[1])
    run = in_process("eval_glue", f"ckpt={tmp_path / 'none'}", f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2 and f"ckpt={tmp_path / 'none'}: no such directory" in run.stderr  # said in the run
    assert runs == [RunMode.RUN, RunMode.RUN]


def test_hydra_mode_multirun_on_the_command_line_makes_a_sweep(tmp_path):
    """Hydra's documented alternative to -m still chooses the multirun: its job's failure is said as a sweep's."""
    run = in_process("eval_glue", "hydra.mode=MULTIRUN", f"ckpt={tmp_path / 'none'}", f"output_dir={tmp_path / 'out'}",
                     f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of the sweep's 1 jobs failed (each job ran): job 0: "), last
