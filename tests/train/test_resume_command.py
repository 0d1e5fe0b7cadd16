"""`pretrain.py resume=...` as users type it: the run goes on with its own config (none of today's defaults,
no data prepared before the checkpoint is found), the command line changes only what a resume may change, a
finished run says so unless extended on purpose, and config.yaml keeps every config the run trained with.
The exactness of a resume itself: test_pretrain.py, test_reliability.py, test_techniques.py."""

import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file

from cramming.pretraining import pretrain as pretrain_in_process
from cramming.train.runs import run_configs
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, TINY_RUN, compose_config, copy_run, only_run, records, summary

MAY_CHANGE = ("budget, train.max_steps, train.optim.lr, train.max_nonfinite_steps, train.check_nonfinite_every, "
              "output_dir, name, cache_dir, data.files, logging, wandb, checkpoint, impl.num_workers, eval")


def stopped_at_step_4(straight_run, output_dir):
    """A copy of the straight run as if it had been stopped after step 4: its newest checkpoint step 4."""
    run_dir = copy_run(straight_run, output_dir)
    for checkpoint in (run_dir / "checkpoints").iterdir():
        if checkpoint.name == "final" or int(checkpoint.name.split("-")[-1]) > 4:
            shutil.rmtree(checkpoint)
    return run_dir


def test_a_finished_run_says_so_and_prepares_nothing(shared_cache, tmp_path, straight_run):
    run_dir = copy_run(straight_run, tmp_path)
    before = (run_dir / "config.yaml").read_text()
    run = subprocess.run([sys.executable, str(REPO_ROOT / "pretrain.py"), "resume=latest", f"output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"finished: resume=latest: {run_dir} has finished (checkpoint {run_dir}/checkpoints/final); to train it "
        "further on purpose, resume it with a larger budget (now 1.0) or train.max_steps (now 8)")
    assert "data:" not in run.stdout and "Traceback" not in run.stderr  # today's default data=wikipedia: untouched
    assert (run_dir / "config.yaml").read_text() == before
    # the command that made the run, typed again: the same settings are no reason to refuse
    again = in_process("pretrain", *STEP_RUN, "resume=latest", f"output_dir={tmp_path}")
    assert again.returncode == 0 and again.stderr.startswith("finished: resume=latest:"), again.stderr


def test_what_a_resume_may_not_change_is_refused_in_one_line(shared_cache, tmp_path, straight_run):
    copy_run(straight_run, tmp_path)
    for overrides, changed in ((["arch.num_layers=4"], "arch.num_layers=4 changes arch.num_layers (2 in the run's "
                                "config.yaml, 4 here)"),
                               (["data=wikipedia"], "data=wikipedia changes data.filter.trash_cutoff (0.4 in the "
                                "run's config.yaml, 0.3 here) and 7 more key(s) of data"),
                               (["train.optim.name=lion"], "optim=lion changes train.optim.name (adamw in the run's "
                                "config.yaml, lion here)"),  # the group choice train.optim.name=lion means
                               (["optim=lion"], "optim=lion changes train.optim.name (adamw in the run's config.yaml, "
                                "lion here)")):
        run = in_process("pretrain", "resume=latest", f"output_dir={tmp_path}", *overrides)
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.strip() == (f"error: resume=latest: {changed}; a resume goes on with the run's config and "
                                      f"may change only {MAY_CHANGE}: start a new run to change anything else")


def test_resume_latest_alone_goes_on_exactly_with_the_runs_own_config(shared_cache, tmp_path, straight_run):
    run_dir = stopped_at_step_4(straight_run, tmp_path)  # name=t, data=embedded, train=steps: none of the defaults
    run = in_process("pretrain", "resume=latest", f"output_dir={tmp_path}")
    assert run.returncode == 0, run.stderr
    assert f"resuming {run_dir}/checkpoints/step-00000004 at step 4" in run.stdout
    final, expected = (load_file(path / "checkpoints/final/model.safetensors") for path in (run_dir, straight_run))
    assert all(torch.equal(final[key], expected[key]) for key in expected)
    assert [record["loss"] for record in records(run_dir)] == [record["loss"] for record in records(straight_run)]
    first, resumed = run_configs(run_dir)  # appended, the run's first config kept as it was
    assert first == run_configs(straight_run)[0]
    assert resumed.resume == str(run_dir / "checkpoints" / "step-00000004")
    assert {key: value for key, value in resumed.items() if key not in ("resume", "output_dir")} == \
        {key: value for key, value in first.items() if key not in ("resume", "output_dir")}


def test_a_finished_run_goes_on_with_a_larger_budget(shared_cache, tmp_path, simulated_clock):
    run_dir = pretrain_in_process(compose_config(TINY_RUN + ["budget=0.0002", f"output_dir={tmp_path}",
                                                             "logging.every_steps=1"]))
    steps = summary(run_dir)["steps"]
    run = in_process("pretrain", "resume=latest", f"output_dir={tmp_path}", "budget=0.0004", "checkpoint.keep_last=1")
    assert run.returncode == 0, run.stderr
    assert "resume: budget=0.0004 from the command line (the run had 0.0002)" in run.stdout
    assert only_run(tmp_path) == run_dir and summary(run_dir)["steps"] > steps  # on in its own directory
    assert [r["step"] for r in records(run_dir)] == list(range(1, summary(run_dir)["steps"] + 1))
    assert summary(run_dir)["budget_gpu_hours"] == 0.0004 and summary(run_dir)["budget_used_fraction"] == 1.0
    configs = run_configs(run_dir)
    assert [(c.budget, c.checkpoint.keep_last) for c in configs] == [(0.0002, 2), (0.0004, 1)]


def test_a_run_of_steps_goes_on_with_a_larger_max_steps(shared_cache, tmp_path, straight_run):
    run_dir = copy_run(straight_run, tmp_path)
    run = in_process("pretrain", "resume=latest", f"output_dir={tmp_path}", "train.max_steps=10")
    assert run.returncode == 0, run.stderr
    assert "resume: train.max_steps changed from 8 to 10" in run.stdout
    assert summary(run_dir)["steps"] == 10 and [r["step"] for r in records(run_dir)] == list(range(1, 11))
    assert summary(run_dir)["outside_training"]["loop_start_and_end_s"] > 0  # the wall clock: the final checkpoint


def test_eval_glue_says_which_checkpoint_latest_is(tmp_path, straight_run):
    run = in_process("eval_glue", "ckpt=latest", f"runs_dir={straight_run.parent.parent}", "eval.tasks=[rte]",
                     f"eval.data_dir={tmp_path / 'no-glue'}", f"output_dir={tmp_path / 'glue'}")
    assert f"ckpt=latest: {straight_run}/checkpoints/final\n" in run.stdout
    assert run.returncode == 2  # there is no GLUE data here: the checkpoint was chosen before that


def test_a_resume_keeps_the_number_of_processes_and_says_so_before_any_starts(shared_cache, tmp_path, straight_run,
                                                                               monkeypatch):
    copy_run(straight_run, tmp_path)  # trained as one process
    launched = in_process("launch", "--nproc_per_node=2", str(REPO_ROOT / "pretrain.py"), "resume=latest",
                          f"output_dir={tmp_path}", "train.max_steps=9", cwd=tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun starts each process
    under_torchrun = in_process("pretrain", "resume=latest", f"output_dir={tmp_path}", "train.max_steps=9")
    for run in (launched, under_torchrun):
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.strip() == (
            "error: resume=latest: the run trained as 1 process(es) and this is 2; a resume keeps that number "
            "(each process reads its own slice of every batch): run it as one process "
            "(python pretrain.py, no torchrun)")
    assert "data:" not in under_torchrun.stdout  # nothing prepared


def test_a_run_asking_for_an_absurd_model_is_one_line_before_any_allocation(shared_cache, tmp_path,
                                                                            straight_run):
    """config.yaml edited to hidden_size 1e9: the checkpoint's trainer state says it trained another model;
    both edited alike, its weights' header says no weight is that wide. Either before the model is built."""
    run_dir = stopped_at_step_4(straight_run, tmp_path)
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("\n  hidden_size: 128\n", "\n  hidden_size: 1000000000\n"))
    checkpoint = run_dir / "checkpoints" / "step-00000004"
    differs = in_process("pretrain", f"resume={run_dir}")
    assert differs.returncode == 2 and "Traceback" not in differs.stderr
    assert differs.stderr.strip().splitlines()[-1].startswith(
        f"error: resume={checkpoint}: the settings differ from the checkpoint's (arch.hidden_size: 128 in "
        "the checkpoint, 1000000000 now)")
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=True)
    state["fingerprint"]["arch"]["hidden_size"] = 1_000_000_000
    torch.save(state, checkpoint / "trainer_state.pt")
    run = subprocess.run([sys.executable, str(REPO_ROOT / "pretrain.py"), f"resume={run_dir}"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        "error: the config this resume trains with sets arch.hidden_size=1000000000, which does not fit the "
        f"weights in {checkpoint / 'model.safetensors'} (they hold no dimension above 4096 (bert."
        "embeddings.word_embeddings.weight [4096, 128])): the config does not describe these weights (damaged "
        "or edited?)")
    assert not (run_dir / "checkpoints" / "step-00000005").exists()


def test_a_resume_goes_on_in_its_own_folder_whatever_its_name_and_a_new_name_must_be_one_folder(
        shared_cache, tmp_path, straight_run):
    """A run made before names were checked (here in `my run/`) resumes in place; a name given to a resume
    is the folder of a new run directory, so it follows the rule, before anything is prepared."""
    run_dir = stopped_at_step_4(straight_run, tmp_path)
    legacy = run_dir.parent.with_name("my run")
    run_dir.parent.rename(legacy)
    refused = in_process("pretrain", f"resume={legacy / run_dir.name}", "name=../../elsewhere")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "data:" not in refused.stdout
    assert refused.stderr.strip().startswith("error: name='../../elsewhere' names the folder <output_dir>/")
    resumed = in_process("pretrain", f"resume={legacy / run_dir.name}")
    assert resumed.returncode == 0, resumed.stderr
    assert (legacy / run_dir.name / "checkpoints" / "final").is_dir()
    assert sorted(tmp_path.iterdir()) == [legacy]  # on in place: no new run directory
