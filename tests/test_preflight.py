"""A run fails at its start, never at its end (cramming.preflight): each problem that would otherwise surface
after data preparation or after training is one line and exit 2 before any data, device or output work,
through the command line (pretrain.py, a -m sweep, scripts/ablate.py, scripts/launch.py); and
`preflight=true` checks it all, tries one microbatch and prints the plan, writing nothing."""

import gzip
import http.server
import os
import shutil
import socket
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from cramming.errors import CrammingError
from tests.commands import in_process, in_subprocess
from tests.conftest import REPO_ROOT
from tests.eval.conftest import GLUE_DIR
from tests.train.runs import NO_PROBE

QUICK = ["--config-name", "quickstart", NO_PROBE]


def NO_WANDB_LOGIN(tmp_path) -> dict:  # noqa: N802  (an environment, like a constant)
    """No API key in the environment and no netrc file: what `wandb login` would have written is absent."""
    return {"WANDB_API_KEY": None, "NETRC": str(tmp_path / "no-netrc")}


def started_nothing(run, output_dir, cache_dir) -> None:
    """One line, exit 2, no traceback, no training step, no run directory, no data prepared."""
    console = run.stdout + run.stderr
    assert run.returncode == 2 and "Traceback" not in console, console
    assert not any(line.startswith("step ") for line in console.splitlines())
    assert not output_dir.exists() or not any(output_dir.rglob("checkpoints"))
    assert not (cache_dir / "data").exists()  # data preparation never began
    assert len(run.stderr.strip().splitlines()) == 1 and run.stderr.startswith("error: ")


def late_failures(tmp_path) -> list:
    """(what would otherwise fail late, overrides, environment, words of the one line)."""
    empty_glue = tmp_path / "no-glue"
    empty_glue.mkdir()
    free = shutil.disk_usage(tmp_path).free
    return [
        ("a mistyped GLUE task, found after training", ["eval=glue", "eval.tasks=[rtee]", f"eval.data_dir={GLUE_DIR}"],
         {}, "unknown GLUE task 'rtee'; known tasks: cola"),
        ("a GLUE protocol value, found after training", ["eval=glue", "eval.tasks=[rte]", "eval.lr=-1",
                                                         f"eval.data_dir={GLUE_DIR}"], {},
         "eval.lr=-1.0 must be positive and finite"),
        ("a GLUE folder without the task's files, found after training",
         ["eval=glue", "eval.tasks=[rte]", f"eval.data_dir={empty_glue}"], {}, "no data for any requested task"),
        ("GLUE from the hub while offline, found after training", ["eval=glue", "eval.tasks=[rte]"],
         {"HF_DATASETS_OFFLINE": "1"}, "HF_DATASETS_OFFLINE=1 forbids it: give eval.data_dir="),
        ("budget_scaling, found after data preparation", ["budget_scaling=bogus"], {},
         "budget_scaling='bogus' must be none or peak"),
        ("W&B online without a login, found at the first log after data preparation", ["wandb=online"],
         NO_WANDB_LOGIN(tmp_path), "wandb=online: no W&B API key"),
        ("checkpoints that cannot fit, found when the disk filled", [f"checkpoint.keep_last={int(free / 1e7)}"], {},
         "disk: the run needs about"),
    ]


CASES = ["glue-task", "glue-value", "glue-files", "glue-hub-offline", "budget-scaling", "wandb-login", "disk"]
# Real subprocesses for the cases read from the environment; the others through the same main() in this process
# (tests/commands.py), a few seconds of interpreter and torch start less each.
FROM_THE_ENVIRONMENT = {"glue-hub-offline", "wandb-login"}


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_a_late_failure_is_one_line_before_any_work(tmp_path, cache_dir, monkeypatch, case):
    _, overrides, environment, words = late_failures(tmp_path)[case]
    for key, value in environment.items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    command = in_subprocess if CASES[case] in FROM_THE_ENVIRONMENT else in_process
    run = command("pretrain", *QUICK, *overrides, f"output_dir={out}", cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert words in run.stderr


def test_several_problems_are_all_in_the_one_line(tmp_path, cache_dir):
    out = tmp_path / "out"
    run = in_process("pretrain", *QUICK, "budget_scaling=bogus", "eval=glue", "eval.tasks=[rtee]",
                     f"eval.data_dir={GLUE_DIR}", "train.optim.lr=-1", f"output_dir={out}", cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert run.stderr.startswith("error: 3 problems: (1) ")
    for words in ("budget_scaling='bogus'", "train.optim.lr=-1.0 must be positive", "unknown GLUE task 'rtee'"):
        assert words in run.stderr


def test_every_kind_of_problem_is_named_in_one_go(tmp_path, cache_dir, monkeypatch):
    """Problems that different checks find, crossed: two config sections, the run's name, the budget, a folder that
    is a file, a truncated input file, the end-of-run evaluation's device and data, and W&B's login; none hides
    another."""
    for key, value in NO_WANDB_LOGIN(tmp_path).items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    compressed = gzip.compress(b"A line of text to train on.\n" * 2000)
    (tmp_path / "cut.txt.gz").write_bytes(compressed[:len(compressed) // 2])
    run = in_subprocess("pretrain", *QUICK, "train.optim.lr=-1", "train.batch_size=0", "name=a/b", "budget=-1",
                        f"output_dir={a_file}", "data=local", f"data.files={tmp_path}/cut.txt.gz", "eval=glue",
                        "eval.tasks=[rte,swag]", f"eval.data_dir={GLUE_DIR}", "eval.device=gpu", "wandb=online",
                        cwd=tmp_path)
    started_nothing(run, a_file, cache_dir)
    said = ["name='a/b' names the folder", "budget=-1.0 must be a positive number", "train.batch_size=0 must be",
            "train.optim.lr=-1.0 must be positive", f"output_dir={a_file}: {a_file} is a file, not a directory",
            "cut.txt.gz is truncated", "eval.device='gpu' is not auto", "wandb=online: no W&B API key",
            f"no data for swag: {GLUE_DIR}/SWAG/train.csv not found"]
    assert run.stderr.startswith(f"error: {len(said)} problems: (1) "), run.stderr
    assert all(words in run.stderr for words in said), run.stderr


@pytest.mark.parametrize(("budget", "refused"), [("1e9", "budget=1e+09 is more than a run can be planned for"),
                                                 ("-1", "budget=-1.0 must be a positive number")])
def test_the_preflight_plans_no_end_time_for_a_budget_it_refuses(tmp_path, budget, refused):
    run = in_process("pretrain", *QUICK, "preflight=true", f"budget={budget}", f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert f"  1. {refused}" in run.stdout
    assert "  budget: " not in run.stdout and "would end at" not in run.stdout


def test_every_job_of_a_sweep_is_checked_before_the_first_trains(tmp_path, cache_dir):
    out = tmp_path / "out"
    run = in_subprocess("pretrain", "-m", *QUICK, "budget_scaling=none,bogus", f"output_dir={out}",
                        f"hydra.sweep.dir={out}/multirun", cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert "budget_scaling='bogus' must be none or peak" in run.stderr


def test_every_run_of_an_ablation_is_checked_before_the_first_trains(tmp_path, cache_dir):
    out = tmp_path / "sweep"
    run = in_subprocess("ablate", "sweep=smoke", f"output_dir={out}", "overrides=['eval=glue','eval.tasks=[rtee]']",
                        cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert "sweep smoke: run adamw: unknown GLUE task 'rtee'" in run.stderr
    assert "run lion: unknown GLUE task" in run.stderr


def test_launch_checks_the_whole_run_before_torchrun_starts_a_process(tmp_path, cache_dir):
    out = tmp_path / "out"
    run = in_subprocess("launch", "--nproc_per_node=2", str(REPO_ROOT / "pretrain.py"), *QUICK, "eval=glue",
                        "eval.tasks=[rtee]", f"eval.data_dir={GLUE_DIR}", f"output_dir={out}", cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert "unknown GLUE task 'rtee'" in run.stderr and "rank" not in run.stderr


def test_the_preflight_of_the_quick_start_plans_and_writes_nothing(tmp_path, cache_dir):
    """The quick start as users run it (the probe on), with eval=glue on local files: exit 0 and the plan."""
    out = tmp_path / "out"
    run = in_subprocess("pretrain", "--config-name", "quickstart", "preflight=true", "eval=glue",
                        "eval.tasks=[rte,mrpc]", f"eval.data_dir={GLUE_DIR}", f"output_dir={out}", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    lines = lines[next(n for n, line in enumerate(lines) if line.startswith("plan: ")):]  # after the log's lines
    assert lines[0] == "plan: crammed-bert-tiny on gpu=cpu, data=embedded, wordpiece vocabulary 4096, sequences of 128"
    assert any(line.startswith("  budget: 0.02 GPU-hours = 0h01m12s of training") for line in lines)
    assert any(line.startswith("  microbatch: 32 sequences (cpu profile) on cpu: forward and backward in")
               for line in lines)
    assert any(line.startswith("  expected: about ") and "optimizer steps" in line for line in lines)
    assert any(line.startswith("  disk: the prepared dataset (about ") for line in lines)  # a fresh cache
    assert any(line.startswith("  disk: 4 checkpoints of 10.2 MB (0.9M parameters") for line in lines)
    assert "  validation: at 25%, 50%, 75% of training and at the end, with BLiMP on 10 pairs a paradigm" in run.stdout
    assert "  at the end: GLUE fine-tuning on rte, mrpc (from " in run.stdout
    # The embedded corpus is about 16 passes of the quick start's training: how many depends on this machine's speed
    notes = [line for line in lines if line.startswith("  1. ")]
    assert (lines[-1].startswith("preflight: the run would start cleanly") or
            notes[-1].startswith("  1. the data repeats: about ") and lines[-2].startswith("preflight: the run would "
                                                                                          "start, no problem found"))
    assert not out.exists() and not (cache_dir / "data").exists()


def test_the_preflight_lists_every_problem(tmp_path, cache_dir, monkeypatch):
    for key, value in NO_WANDB_LOGIN(tmp_path).items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    run = in_subprocess("pretrain", *QUICK, "preflight=true", "budget_scaling=bogus", "eval=glue",
                        "eval.tasks=[rtee]", f"eval.data_dir={GLUE_DIR}", "wandb=online", f"output_dir={out}",
                        cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    assert "preflight: 3 problem(s); the run would not start:" in run.stdout
    listed = [line for line in run.stdout.splitlines() if line.startswith(("  1. ", "  2. ", "  3. "))]
    assert [line[5:30] for line in listed] == ["budget_scaling='bogus' mu", "unknown GLUE task 'rtee';",
                                               "wandb=online: no W&B API "]
    assert "  microbatch trial: not run until the problems below are fixed" in run.stdout
    assert not out.exists() and not (cache_dir / "data").exists()


def test_the_plan_says_what_eval_skip_missing_leaves_out_and_never_calls_the_run_clean(tmp_path):
    run = in_process("pretrain", *QUICK, "preflight=true", "eval=glue", "eval.tasks=[rte,swag]",
                     f"eval.data_dir={GLUE_DIR}", "eval.skip_missing=true", f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (f"  at the end: GLUE fine-tuning on rte, swag (from {GLUE_DIR}), outside the budget; skipped for want of "
            "data (eval.skip_missing=true): swag") in run.stdout
    assert "cleanly" not in run.stdout and "preflight: the run would start, no problem found" in run.stdout
    assert (f". eval.skip_missing=true: no data for swag: {GLUE_DIR}/SWAG/train.csv not found; the end of the run "
            "would skip it") in run.stdout


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_wandb_probe_tells_an_answer_from_a_refusal_and_from_silence_in_bounded_time(closed_port, monkeypatch):
    import cramming.preflight.checks
    from cramming.preflight.checks import wandb_unreachable

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501 to HEAD
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_port}")
    assert wandb_unreachable() is None  # any status is an answer
    server.shutdown()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port}")
    assert "Connection refused" in wandb_unreachable()
    monkeypatch.setattr(cramming.preflight.checks, "WANDB_PROBE_SECONDS", 0.2)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.perf_counter()
        assert wandb_unreachable() in ("timed out", "no answer within 0.2 s")
        assert time.perf_counter() - started < 1


@pytest.mark.parametrize("if_unreachable", ["offline", "error"])
def test_wandb_online_out_of_reach_is_planned_offline_or_refused(tmp_path, cache_dir, closed_port, monkeypatch,
                                                                  if_unreachable):
    monkeypatch.setenv("WANDB_API_KEY", "a-key")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port}")
    run = in_process("pretrain", *QUICK, "preflight=true", "wandb=online", f"wandb.if_unreachable={if_unreachable}",
                     f"output_dir={tmp_path / 'out'}")
    assert "Traceback" not in run.stdout + run.stderr and "cleanly" not in run.stdout
    if if_unreachable == "offline":
        assert run.returncode == 0, run.stdout + run.stderr
        assert ("  W&B: offline, in <run>/wandb/: 127.0.0.1 cannot be reached ([Errno 111] Connection refused; "
                "wandb.if_unreachable=offline)") in run.stdout
        assert (". wandb=online: 127.0.0.1 cannot be reached ([Errno 111] Connection refused); the run would log to "
                "W&B offline (wandb.if_unreachable=offline), to `wandb sync` later") in run.stdout
    else:
        assert run.returncode == 2
        assert ("  1. wandb=online: 127.0.0.1 cannot be reached ([Errno 111] Connection refused) and "
                "wandb.if_unreachable=error: check the network, or log offline") in run.stdout


def test_a_run_whose_wandb_is_out_of_reach_starts_offline_and_says_so_first(shared_cache, tmp_path, closed_port,
                                                                            monkeypatch, simulated_clock):
    monkeypatch.setenv("WANDB_API_KEY", "a-key")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port}")
    run = in_subprocess("pretrain", *QUICK, "wandb=online", "budget=0.0002", "data.validation_rows=0",
                        f"output_dir={tmp_path}", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    console = (run.stdout + run.stderr).splitlines()
    said = next(n for n, line in enumerate(console) if line.startswith("wandb=online: 127.0.0.1 cannot be reached"))
    assert said < next(n for n, line in enumerate(console) if line.startswith("data: "))  # before the data
    assert console[said].endswith("this run logs to W&B offline, in <run>/wandb/ (`wandb sync "
                                  "<run>/wandb/offline-run-*` uploads it later; wandb.if_unreachable=error stops "
                                  "instead)")
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    assert list((run_dir / "wandb").glob("offline-run-*"))
    assert "mode: offline" in (run_dir / "config.yaml").read_text()


def test_a_microbatch_that_does_not_fit_is_named(monkeypatch):
    """The GPU's out-of-memory, which a CPU cannot produce on demand, raised by the trial's backward."""
    import cramming.engine.step
    from cramming import compose_config
    from cramming.preflight.checks import device_and_budget
    from cramming.preflight.plan import trial_microbatch

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(cramming.engine.step, "backward", out_of_memory)
    cfg = compose_config("quickstart", ["impl.microbatch_size=4096"])
    with pytest.raises(CrammingError, match=r"preflight: microbatch 4096 \(impl.microbatch_size\) does not fit in "
                                            r"cpu's memory: set impl.microbatch_size smaller"):
        trial_microbatch(cfg, device_and_budget(cfg)[0])


def test_a_long_run_is_planned_in_strides_within_a_percent_of_step_by_step(monkeypatch):
    """The plan of the longest budget (1e6 GPU-hours) simulates a bounded number of strides, not a billion steps."""
    import cramming.preflight.plan
    from cramming import compose_config
    from cramming.preflight.plan import Trial, _simulated

    cfg, trial = compose_config("quickstart", ["budget=100"]), Trial(32, "cpu profile", 1.0, 0.9, "cpu")
    tokens, steps, _ = _simulated(cfg, trial, 100 * 3600)
    monkeypatch.setattr(cramming.preflight.plan, "SIMULATED_STEPS", 1000)
    strided_tokens, strided_steps, record = _simulated(cfg, trial, 100 * 3600)
    assert len(record) < 2000 and strided_tokens == tokens and strided_steps == pytest.approx(steps, rel=0.01)


def test_the_memory_check_reads_the_gpus_own_memory(monkeypatch):
    """The CUDA branch, reached without a GPU: a card of 1 MB cannot hold the quick start's model."""
    import cramming.preflight.checks
    from cramming import compose_config
    from cramming.preflight.checks import check_memory

    monkeypatch.setattr(cramming.preflight.checks, "device_type", lambda cfg: "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(total_memory=10**6))
    with pytest.raises(CrammingError, match=r"^memory: the model of arch has \S+ parameters, whose fp32 weights, "
                                            r"gradients and adamw's state need about \S+ MB, and cuda has 1 MB"):
        check_memory(compose_config("quickstart", []))


def test_the_disk_estimate_counts_every_kept_checkpoint(tmp_path):
    from cramming import compose_config
    from cramming.preflight.checks import disk_needs

    cfg = compose_config("quickstart", [f"output_dir={tmp_path}", "checkpoint.keep_last=3",
                                        "checkpoint.keep_at=[0.1,0.2]"])
    dataset, checkpoints = disk_needs(cfg)
    from cramming.model import build_mlm_model

    parameters = sum(p.numel() for p in build_mlm_model(cfg.arch, 4096).parameters())  # the embedded vocabulary
    assert checkpoints.what.startswith("7 checkpoints of ")  # 3 kept, 1 being written, final, 2 keep_at
    assert checkpoints.bytes == 7 * 12 * parameters  # 4 bytes of fp32 weights, 8 of AdamW's two moments
    assert dataset.where == Path(os.path.expanduser(str(cfg.cache_dir)))
