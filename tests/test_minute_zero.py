"""Every setting a run will read is checked before it trains: the end-of-run GLUE's keys, the data's files and what
its filters and vocabulary keep, a teacher's or a ticket's vocabulary, the environment; each refused in one line
at the start (exit 2, no traceback, no step, nothing written) through `python pretrain.py`, and listed by
`preflight=true`, which never calls a run clean that is not. Settings that could train something else than
asked train what was asked or say so at the start."""

import gzip
import json
import random

import pytest
import torch
from safetensors.torch import load_file

from tests.commands import in_process, in_subprocess
from tests.eval.conftest import GLUE_DIR
from tests.test_preflight import QUICK, started_nothing

GLUE = ["eval=glue", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}"]
TINY_BUDGET = "budget=0.0005"  # 1.8 s of training on the clock


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """A finished quick-start run (a teacher, a ticket: vocabulary 4096), a small text file, a truncated gzip
    beside a good one, and a jsonl file whose records lack their text one time in four."""
    root = tmp_path_factory.mktemp("minute-zero")
    run = in_process("pretrain", *QUICK, TINY_BUDGET, f"output_dir={root / 'runs'}", f"cache_dir={root / 'cache'}")
    assert run.returncode == 0, run.stderr
    (final,) = (root / "runs").glob("quickstart/*/checkpoints/final")
    random.seed(0)
    words = "the of and a to in is was that for it with as his on be at by had are but from or have".split()
    text = "\n\n".join(" ".join(random.choices(words, k=120)).capitalize() + "." for _ in range(300))
    (root / "small.txt").write_text(text)
    shards = root / "shards"
    shards.mkdir()
    compressed = gzip.compress(text.encode())
    (shards / "a.txt.gz").write_bytes(compressed)
    (shards / "b.txt.gz").write_bytes(compressed[:len(compressed) // 2])
    with open(root / "records.jsonl", "w") as handle:
        for number in range(1997):
            record = {"id": number} if number % 4 == 0 and number < 1988 else {"text": f"Record {number}. {text[:400]}"}
            handle.write(json.dumps(record) + "\n")
    return {"root": str(root), "final": str(final), "small": str(root / "small.txt"), "shards": str(shards),
            "records": str(root / "records.jsonl")}


CASES = [  # (name, overrides, environment, words of the one line)
    ("max-length", [*GLUE, "eval.max_length=256"], {},
     "eval.max_length=256 exceeds the final checkpoint's (arch.max_position_embeddings) 128 positions"),
    ("peft-targets", [*GLUE, "eval.peft=lora", "eval.peft_target_modules=[query,value]"], {},
     "eval.peft_target_modules: 'query' names no Linear layer of the encoder; choose among attention.qkv"),
    ("eval-device", [*GLUE, "eval.device=gpu"], {}, "eval.device='gpu' is not auto, cpu, cuda or cuda:<index>"),
    ("eval-cuda", [*GLUE, f"eval.device=cuda:{torch.cuda.device_count()}"], {}, "eval.device=cuda:"),
    ("eval-precision", [*GLUE, "eval.precision=bfloat16"], {}, "eval.precision='bfloat16' must be auto, fp32"),
    ("eval-baseline", [*GLUE, "eval.baseline={root}/no-results.json"], {},
     "eval.baseline={root}/no-results.json: cannot read it (No such file or directory)"),
    ("truncated-gzip", ["data=local", "data.files={shards}/*.txt.gz"], {},
     "data.files: {shards}/b.txt.gz is truncated: its gzip stream ends before its end marker"),
    ("min-chars", ["data.filter.min_chars=100000"], {},
     "data.filter.min_chars=100000: every document is shorter — the filters keep none of the whole source"),
    ("tiny-vocabulary", ["data.tokenizer.vocab_size=6"], {},
     "data.tokenizer.vocab_size=6 is too small: 5 special tokens and"),
    ("vocabulary-beyond-corpus", ["data=local", "data.files={small}", "data.tokenizer.vocab_size=60000"], {},
     "the tokenizer's training text supports only"),
    ("teacher-vocabulary", ["train.distill.teacher={final}", "data.tokenizer.vocab_size=2048"], {},
     "its vocabulary has 4096 tokens and this run's data.tokenizer.vocab_size=2048"),
    ("ticket-vocabulary", ["train.sparsity.method=lottery", "train.sparsity.ticket={final}",
                           "data.tokenizer.vocab_size=2048"], {},
     "that run's data.tokenizer.vocab_size=4096 differs from this one's (2048), so its embedding has another shape"),
    ("wandb-project", ["wandb=offline", "wandb.project=my/proj"], {},
     "wandb.project='my/proj' is not a W&B project name"),
    ("simulated-clock", [], {"CRAMMING_SIMULATED_MICROBATCH_SECONDS": "0.5s"},
     "CRAMMING_SIMULATED_MICROBATCH_SECONDS='0.5s' must be a positive number of seconds"),
    ("init-std", ["arch.init_std=2"], {}, "arch.init_std must be positive and at most 0.2, got 2.0 (100x the recipe's"),
    ("microbatch-over-batch", ["train.batch_size=8", "impl.microbatch_size=16"], {},
     "impl.microbatch_size=16 exceeds train.batch_size=8"),
    ("superglue-without-files", ["eval=superglue", f"eval.data_dir={GLUE_DIR}"], {},
     f"no data for boolq: {GLUE_DIR}/BoolQ/train.jsonl not found; cb: {GLUE_DIR}/CB/train.jsonl not found;"),
    ("task-without-files", ["eval=glue", "eval.tasks=[rte,swag]", f"eval.data_dir={GLUE_DIR}"], {},
     f"no data for swag: {GLUE_DIR}/SWAG/train.csv not found — the run would leave it out: add the files, or set "
     "eval.skip_missing=true to run the rest without them"),
    ("submission-without-test-split", [*GLUE, "eval.predict_test=true"], {},
     f"no data for the submission's RTE.tsv: {GLUE_DIR}/RTE/test.tsv not found — the run would leave it out"),
]


# Through the command line, one run a group: a group's cases are independent, so each is in the one line. The first
# group runs as `python pretrain.py` in a process of its own; the others through the same main() in this process
# (tests/commands.py), which saves a process start each.
COMMAND_LINE_GROUPS = [["max-length", "peft-targets", "eval-device", "eval-precision", "eval-baseline"],
                       ["wandb-project", "simulated-clock", "init-std", "microbatch-over-batch"],
                       ["teacher-vocabulary", "ticket-vocabulary"], ["eval-cuda"], ["truncated-gzip"], ["min-chars"],
                       ["tiny-vocabulary"], ["vocabulary-beyond-corpus"], ["superglue-without-files"],
                       ["task-without-files"], ["submission-without-test-split"]]
BY_NAME = {case[0]: case for case in CASES}


def test_every_case_is_run_through_the_command_line():
    assert sorted(name for group in COMMAND_LINE_GROUPS for name in group) == sorted(BY_NAME)


@pytest.mark.parametrize("group", COMMAND_LINE_GROUPS, ids=["+".join(group) for group in COMMAND_LINE_GROUPS])
def test_a_setting_that_would_fail_later_is_refused_at_the_start(inputs, tmp_path, cache_dir, monkeypatch, group):
    overrides, words = [], []
    for name in group:
        _, case_overrides, environment, case_words = BY_NAME[name]
        overrides += [override.format(**inputs) for override in case_overrides if override not in overrides]
        words.append(case_words.format(**inputs))
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    command = in_subprocess if group == COMMAND_LINE_GROUPS[0] else in_process
    run = command("pretrain", *QUICK, *overrides, f"output_dir={out}", cwd=tmp_path)
    started_nothing(run, out, cache_dir)
    assert not out.exists()
    assert run.stderr.startswith(f"error: {len(group)} problems: (1) " if len(group) > 1 else "error: ")
    for said in words:
        assert said in run.stderr, run.stderr


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_preflight_lists_the_same_problem(inputs, tmp_path, cache_dir, monkeypatch, case):
    """preflight=true runs the same checks: the problem listed, exit 2, never "cleanly"."""
    _, overrides, environment, words = case
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    run = in_process("pretrain", *QUICK, "preflight=true", *(o.format(**inputs) for o in overrides),
                     f"output_dir={out}")
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert "preflight: 1 problem(s); the run would not start:" in run.stdout
    assert words.format(**inputs) in run.stdout and "cleanly" not in run.stdout
    assert not out.exists() and not (cache_dir / "data").exists()


def test_the_preflight_says_what_it_could_not_check(tmp_path, cache_dir):
    """Two Gutenberg shards at the recipe's 32768-token vocabulary: the first 2 MB read cannot judge the vocabulary
    against the corpus, so the preflight does not call the run clean; it says what is left to the preparation."""
    shards = GLUE_DIR.parent / "corpus" / "gutenberg_en"
    if not shards.exists():
        pytest.skip(f"shared corpus not found at {shards}")
    run = in_process("pretrain", *QUICK, "preflight=true", "data=local", f"data.files='{shards}/train-00[01].txt.gz'",
                     f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cleanly" not in run.stdout
    assert "preflight: the run would start, no problem found (checked in" in run.stdout
    assert ("  1. not checked before the run: data.tokenizer.vocab_size=32768 against the corpus, and the trash "
            "filter: judged as the data is prepared") in run.stdout


def test_settings_that_trained_something_else_now_do_what_they_say(shared_cache, tmp_path, monkeypatch,
                                                                   simulated_clock):
    """One run with four settings that each ended in exit 0 doing something else than asked: a batch smaller than
    the profile's microbatch (trained at the microbatch), keep_at fractions no step begins at (never written), a
    data slice the run repeats hundreds of times (in silence), a path under `~` (written to a literal ./~)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    run = in_subprocess("pretrain", *QUICK, "budget=0.0002", "data.max_tokens=256", "data.validation_rows=0",
                        "train.batch_size=8",
                        "checkpoint.keep_at=[0.97,0.99]", "output_dir=~/runs", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    console = (run.stdout + run.stderr).splitlines()
    (run_dir,) = (tmp_path / "home" / "runs" / "quickstart").iterdir()  # ~ expanded once, for the checks and the run
    assert not (tmp_path / "~").exists()

    assert any("microbatch 8 (cpu profile, capped at train.batch_size)" in line for line in console)
    steps = [line for line in console if line.startswith("step ")]
    assert steps and all("| batch 8 |" in line for line in steps), steps
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 6  # the clock's 6 microbatches, of 8 each

    kept = sorted(path.name for path in (run_dir / "checkpoints").glob("at-*"))  # the last step began at 87%
    assert kept == ["at-0.97-step-00000006", "at-0.99-step-00000006"]
    assert "checkpoint.keep_at 0.97: no step began at or after it (the last began at 86.8% of training): kept the " \
           "final weights as at-0.97-step-00000006" in console
    final = load_file(run_dir / "checkpoints" / "final" / "model.safetensors")
    for name in kept:
        weights = load_file(run_dir / "checkpoints" / name / "model.safetensors")
        assert all(torch.equal(weights[key], final[key]) for key in final)

    warning = console.index("the data holds 2 training rows and step 5 has gone through them 20 times "
                            "(data.max_tokens=256): past 16 epochs more passes are worth little; give more data or a "
                            "shorter budget")
    assert console[warning + 1].startswith("step 5 ")  # said with the step that passed 16 epochs
    assert "the run went through its 2 training rows 24 times" in console


def test_an_export_into_a_folder_with_files_is_refused_unless_told_to_overwrite(inputs, tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    refused = in_subprocess("export", f"ckpt={inputs['final']}", f"out={out}", cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (f"error: out={out} is not empty (it holds 1 file(s) or folder(s)): the export "
                                      "would mix with them; choose a new or empty folder, or add overwrite=true to "
                                      "replace what is there")
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt"]
    replaced = in_process("export", f"ckpt={inputs['final']}", f"out={out}", "overwrite=true")
    assert replaced.returncode == 0, replaced.stderr
    assert not (out / "notes.txt").exists() and (out / "config.json").exists()


def test_records_without_text_are_counted_as_dropped(inputs, cache_dir):
    run = in_subprocess("prepare_data", "data=local", f"data.files={inputs['records']}",
                        "data.tokenizer.vocab_size=100", f"cache_dir={cache_dir}")
    assert run.returncode == 0, run.stderr
    (meta,) = cache_dir.glob("data/*/meta.json")
    documents = json.loads(meta.read_text())["documents"]
    assert documents["read"] == 1997 and documents["dropped"]["no_text"] == 497
    assert "no_text 497" in run.stdout


def test_one_jobs_failure_at_its_end_does_not_end_the_sweep(shared_cache, tmp_path):
    """GLUE at lr 1e30 fails only after job 0 trained (no check can know it before): job 1 still runs, and the
    sweep ends in exit 2 naming job 0."""
    out = tmp_path / "out"
    run = in_process("pretrain", "-m", *QUICK, "budget=0.0001", "data.validation_rows=0", *GLUE,
                     "eval.max_train_examples=16", "eval.epochs=1", "eval.warmup_fraction=0", "eval.lr=1e30,4e-5",
                     f"output_dir={out}", f"hydra.sweep.dir={out}/multirun")
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of the sweep's 2 jobs failed (each job ran): job 0: rte: the model's outputs")
    assert list((out / "multirun" / "1").glob("quickstart/*/glue/glue_results.json"))


def test_every_jobs_end_of_run_is_checked_before_the_first_job_trains(tmp_path, cache_dir):
    out = tmp_path / "out"
    run = in_process("pretrain", "-m", *QUICK, "budget=0.003,0.004", *GLUE, "eval.device=gpu", f"output_dir={out}",
                     f"hydra.sweep.dir={out}/multirun")
    started_nothing(run, out, cache_dir)
    assert "eval.device='gpu' is not auto, cpu, cuda or cuda:<index>" in run.stderr
