"""scripts/ablate.py: a sweep at equal budget gives one table and one loss plot, and a second call
finishes an interrupted sweep without rerunning what is done."""

import json
import subprocess
import sys

import pytest
from matplotlib.image import imread

from cramming.ablate.sweep import SweepConfig, check_sweep
from cramming.errors import CrammingError
from tests.commands import in_process
from tests.conftest import REPO_ROOT, SHARED_DATA
from tests.train.runs import NO_PROBE

GLUE_DIR = SHARED_DATA / "glue"


def ablate(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "ablate.py"), *arguments],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_smoke_sweep_writes_the_table_and_the_plot_then_skips_finished_runs(shared_cache, tmp_path):
    out = tmp_path / "sweep"
    scored = (GLUE_DIR / "RTE").is_dir()  # the GLUE column where the GLUE files are at hand
    glue = [f"'eval=glue','eval.tasks=[rte]','eval.data_dir={GLUE_DIR}','eval.max_train_examples=32','eval.epochs=1',"
            ] if scored else []
    overrides = f"overrides=[{''.join(glue)}'{NO_PROBE}']"
    run = ablate("sweep=smoke", f"output_dir={out}", overrides)
    assert run.returncode == 0, run.stderr
    table = (out / "ablations.md").read_text()
    header = table.splitlines()[0]  # names the sweep's base and the command's overrides
    assert header.startswith("Sweep `smoke`, equal budget; every run: `data=embedded arch=crammed-bert-tiny")
    assert not scored or "eval.epochs=1" in header
    assert table.splitlines()[2].endswith("| stopped | GLUE |" if scored else "| stopped |")
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| option")]
    assert [row.split(" | ")[0] for row in rows] == ["| adamw", "| lion", "| wsd"]
    for label, row in zip(("adamw", "lion", "wsd"), rows):
        (run_dir,) = (out / "runs" / label).iterdir()
        facts = json.loads((run_dir / "summary.json").read_text())
        assert facts["stop_reason"] == "budget" and facts["budget_gpu_hours"] == 0.0005  # the same budget
        assert f"{facts['smoothed_loss']:.4f}" in row
        assert not scored or row.endswith(f" {facts['glue_score']:.1f} |")
    assert "`train.optim.name=lion`" in table
    assert imread(out / "loss_overlay.png").shape[0] > 100

    (out / "runs" / "wsd" / next((out / "runs" / "wsd").iterdir()).name / "summary.json").unlink()  # as if cut off
    again = in_process("ablate", "sweep=smoke", f"output_dir={out}", overrides)  # the first: a real subprocess
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("finished before") + again.stderr.count("finished before") == 2
    assert len(list((out / "runs" / "wsd").iterdir())) == 1  # resumed in place, not a new run


def test_a_sweep_without_runs_or_with_a_budget_of_its_own_is_refused():
    with pytest.raises(CrammingError, match="needs `runs:`"):
        check_sweep("empty", SweepConfig(base=["data=embedded"], runs={}))
    with pytest.raises(CrammingError, match="run b sets budget=2; the budget belongs in `base`"):
        check_sweep("uneven", SweepConfig(runs={"a": [], "b": ["budget=2"]}))
    with pytest.raises(CrammingError, match=r"sweep=mine: run label='../b' names the folder "
                                            r"<output_dir>/runs/<label>/<timestamp>: it must be 1 to 128"):
        check_sweep("mine", SweepConfig(runs={"a": [], "../b": []}))  # a label is a run's folder


def test_the_sweeps_later_rows_name_an_earlier_row_of_the_same_sweep(tmp_path):
    """configs/sweep/lottery.yaml and distillation.yaml: `\\${output_dir}` reaches each run's config
    unresolved, where it is that run's output_dir, so the tickets read the dense row's runs and the taught
    student the teacher's, wherever the sweep writes."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        sweep = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepConfig),
                                                    compose("ablate", overrides=["sweep=lottery"]).sweep))
        assert list(sweep.runs)[0] == "dense"  # the tickets need it first
        for label in ("ticket-rewound", "ticket-at-init"):
            run = compose("pretrain", overrides=[*sweep.base, *sweep.runs[label], f"name={label}",
                                                 f"output_dir={tmp_path / 'runs'}"])
            assert run.train.sparsity.ticket == str(tmp_path / "runs" / "dense")
        rewound = compose("pretrain", overrides=[*sweep.base, *sweep.runs["ticket-rewound"]])
        dense = compose("pretrain", overrides=[*sweep.base, *sweep.runs["dense"]])
        assert list(dense.checkpoint.keep_at) == [rewound.train.sparsity.rewind]  # the rewind point is kept
        sweep = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepConfig),
                                                    compose("ablate", overrides=["sweep=distillation"]).sweep))
        assert list(sweep.runs)[0] == "teacher-4-layers"
        taught = compose("pretrain", overrides=[*sweep.base, *sweep.runs["student-taught"], "name=student-taught",
                                                f"output_dir={tmp_path / 'runs'}"])
        assert taught.train.distill.teacher == str(tmp_path / "runs" / "teacher-4-layers")


@pytest.mark.slow
def test_every_run_of_every_shipped_sweep_composes_and_passes_the_checks_made_before_any_data():
    """A typo in a sweep YAML (a key, a value out of range, two techniques that conflict) would otherwise show
    only when its row's turn comes, possibly hours into the sweep."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from cramming import as_group_choices
    from cramming.pretraining import check_pretrain_config

    names = sorted(path.stem for path in (REPO_ROOT / "configs" / "sweep").glob("*.yaml"))
    assert {"smoke", "techniques", "ema", "optimizers"} <= set(names)
    checked = 0
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        for name in names:
            sweep = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepConfig),
                                                        compose("ablate", overrides=[f"sweep={name}"]).sweep))
            check_sweep(name, sweep)
            for label, overrides in sweep.runs.items():
                run = compose("pretrain", overrides=as_group_choices([*sweep.base, *overrides, f"name={label}"]))
                check_pretrain_config(run)  # the techniques' checks included
                checked += 1
    assert checked >= 40


def test_the_table_says_equal_steps_when_every_run_stopped_at_the_same_max_steps(tmp_path):
    from cramming.ablate.sweep import write_table

    def run(label, stop_reason, steps):
        (tmp_path / label).mkdir()
        facts = {"smoothed_loss": 7.0, "validation": None, "mean_tokens_per_s": 1000.0, "peak_memory_gb": 1.0,
                 "steps": steps, "stop_reason": stop_reason}
        (tmp_path / label / "summary.json").write_text(json.dumps(facts))
        return tmp_path / label

    sweep = SweepConfig(base=["gpu=cpu", "budget=0.03", "train.progress=steps", "train.max_steps=50"],
                        runs={"a": [], "b": ["train.ema.decay=0.99"]})
    steps = write_table("s", sweep, {"a": run("a", "max_steps", 50), "b": run("b", "max_steps", 50)}, tmp_path / "t.md")
    assert steps.splitlines()[0] == ("Sweep `s`, equal steps; every run: "
                                     "`gpu=cpu budget=0.03 train.progress=steps train.max_steps=50`.")
    budget = write_table("s", sweep, {"a": run("c", "budget", 48), "b": run("d", "max_steps", 50)}, tmp_path / "u.md")
    assert budget.splitlines()[0].startswith("Sweep `s`, equal budget;")


def test_the_table_shows_blimp_and_bits_per_char_and_their_spread_over_seeds(tmp_path):
    """Summaries as runs with train.validation.zero_shot=true leave them: options a and b, two seeds each, where
    the validation loss prefers a and BLiMP and bits per character prefer b."""
    from cramming.ablate.sweep import SweepConfig, write_table

    finals = {("a", 0): (3.0, 55.0, 1.50), ("a", 1): (3.2, 57.0, 1.52), ("b", 0): (3.5, 60.0, 1.40),
              ("b", 1): (3.7, 62.0, 1.42)}
    runs, run_dirs = {}, {}
    for (option, seed), (loss, blimp, bits) in finals.items():
        label = f"{option}-seed{seed}"
        runs[label] = [f"train.mlm_rate={0.15 if option == 'a' else 0.4}", f"train.seed={seed}"]
        run_dirs[label] = tmp_path / label
        run_dirs[label].mkdir()
        (run_dirs[label] / "summary.json").write_text(json.dumps({
            "smoothed_loss": loss, "mean_tokens_per_s": 1000.0, "peak_memory_gb": 0.5, "steps": 10,
            "stop_reason": "budget", "validation": {"final_loss": loss, "final_blimp": blimp,
                                                    "final_bits_per_char": bits}}))
    table = write_table("seeds", SweepConfig(base=["budget=0.1"], runs=runs), run_dirs, tmp_path / "ablations.md")
    assert "| validation MLM loss | BLiMP (%) | bits/char |" in table
    assert "| a-seed0 | `train.mlm_rate=0.15 train.seed=0` | 3.0000 | 3.0000 | 55.00 | 1.5000 |" in table
    assert "| `train.mlm_rate=0.15` | 2 | 3.1000 ± 0.1414 | 56.0000 ± 1.4142 | 1.5100 ± 0.0141 |" in table
    assert "Ranked by validation MLM loss, best first: `train.mlm_rate=0.15` > `train.mlm_rate=0.4`" in table
    assert "Ranked by BLiMP (%), best first: `train.mlm_rate=0.4` > `train.mlm_rate=0.15`" in table
    assert "Ranked by bits/char, best first: `train.mlm_rate=0.4` > `train.mlm_rate=0.15`" in table


def test_compare_runs_shows_the_last_blimp_and_bits_per_char_of_each_run():
    from cramming.cli.compare_runs import zero_shot_rows

    a = [{"step": 5, "loss": 4.0, "val_loss": 4.1, "blimp": 52.0, "bits_per_char": 2.0}, {"step": 6, "loss": 3.9}]
    b = [{"step": 6, "loss": 3.8, "val_loss": 3.9, "blimp": 55.5, "bits_per_char": 1.75}]
    assert zero_shot_rows(a, b) == ["", "held-out bits per character: 2.0000 (step 5) | 1.7500 (step 6) (-0.2500)",
                                    "BLiMP, packaged subset (%): 52.0000 (step 5) | 55.5000 (step 6) (+3.5000)"]
    assert zero_shot_rows([{"step": 1, "loss": 4.0}], [{"step": 1, "loss": 4.0}]) == []


def test_the_gpu_recipe_script_without_its_three_arguments_is_one_line_and_exit_2():
    run = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_recipes.sh"), "shards/*.txt.gz"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: give the corpus glob, the BLiMP folder and the output folder (bash "
        f"{REPO_ROOT / 'scripts' / 'gpu_recipes.sh'} --help)"]
    help_text = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_recipes.sh"), "--help"],
                               capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "bash scripts/gpu_recipes.sh <corpus glob>" in help_text.stdout
