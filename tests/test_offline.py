"""A command that reads the hub, where the hub cannot be reached, ends in its own one line within seconds: with
HF_HUB_OFFLINE set, or without it on a machine whose first connection fails (cramming.hub), instead of
huggingface_hub's five retries of every file (a minute, two warning lines each).

Unreachable is made the same on any machine: HF_ENDPOINT points at a closed local port."""

import pytest

from tests.commands import in_process, in_subprocess

UNREACHABLE = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": None, "HF_DATASETS_OFFLINE": None,
               "TRANSFORMERS_OFFLINE": None}
OUT_OF_REACH = "the hub is out of reach: http://127.0.0.1:9 did not answer"


def no_retries(run) -> None:
    assert "Retrying" not in run.stdout + run.stderr and "Traceback" not in run.stderr, run.stdout + run.stderr


@pytest.mark.slow
def test_the_documented_hub_preflight_without_the_network_lists_one_problem_at_once(tmp_path):
    run = in_subprocess("pretrain", "budget=0.0833", "gpu=cpu", "arch=crammed-bert-tiny", "preflight=true",
                        f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}", env=UNREACHABLE)
    assert run.returncode == 2
    no_retries(run)
    said = run.stdout + run.stderr
    assert said.count("the Hugging Face hub is out of reach (http://127.0.0.1:9 did not answer") == 1
    problem = next(line for line in run.stdout.splitlines() if "cannot load hub dataset wikimedia/wikipedia" in line)
    assert OUT_OF_REACH in problem and "data=embedded and data=local read no network" in problem


@pytest.mark.slow
def test_a_hub_model_without_the_network_is_one_line(tmp_path):
    run = in_subprocess("eval_glue", "ckpt=hf:bert-base-uncased", f"output_dir={tmp_path}", env=UNREACHABLE)
    assert run.returncode == 2
    no_retries(run)
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ckpt=hf:bert-base-uncased: cannot load it (") and OUT_OF_REACH in error


def test_with_hf_hub_offline_set_the_error_says_so(tmp_path):
    run = in_process("eval_glue", "ckpt=hf:bert-base-uncased", f"output_dir={tmp_path}")
    assert run.returncode == 2
    no_retries(run)
    assert "the hub is out of reach: HF_HUB_OFFLINE is set" in run.stderr.strip().splitlines()[-1]
