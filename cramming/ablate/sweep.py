"""Run a named list of override sets at equal budget on the same prepared data and seed, one after
another, then put them in one table and one loss plot: "does X help under a fixed budget?" in one command.

A sweep is a YAML in configs/sweep/ (a Hydra group: `sweep=<name>`): `base`, the overrides every run
shares (data, model, budget), and `runs`, a label and its own overrides for each option. Runs land in
<output_dir>/runs/<label>/<timestamp>/; running the sweep again skips finished runs and resumes an
interrupted one from its last checkpoint.
"""

import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra import compose
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cramming import as_group_choices
from cramming.errors import CrammingError, require
from cramming.files import folder_name, read_json_object, write_atomically
from cramming.preflight.checks import offline_if_unreachable, run_problems
from cramming.pretraining import PretrainConfig, pretrain  # noqa: F401  (PretrainConfig registers the pretraining schemas)
from cramming.train.plots import plot_comparison

log = logging.getLogger("ablate")
FINISHED = ("budget", "max_steps", "early_stop")  # a run that stopped for one of these is done


@dataclass
class SweepConfig:
    """configs/sweep/<name>.yaml: what every run shares, and each option's own overrides."""

    base: list[str] = field(default_factory=list)  # data, model, device, budget: the same for every run
    runs: dict[str, list[str]] = field(default_factory=dict)  # label -> its overrides (never budget=)


@dataclass
class AblateConfig:
    sweep: SweepConfig = MISSING  # sweep=<name> picks configs/sweep/<name>.yaml (smoke, optimizers, schedules)
    multirun: Optional[str] = None  # instead of sweep=: a finished `pretrain.py -m` directory, tabled, not rerun
    output_dir: Optional[str] = None  # null: outputs/ablations/<sweep name>, or the multirun directory
    overrides: list[str] = field(default_factory=list)  # added to every run, after the sweep's base


ConfigStore.instance().store(name="ablate_schema", node=AblateConfig)


def setting(override: str) -> str:
    """The key an override sets: `budget` of `budget=2`, `+budget=2` and `~budget`."""
    return override.split("=", 1)[0].lstrip("+~")


def check_sweep(name: str, sweep: SweepConfig) -> None:
    if not sweep.runs:
        raise CrammingError(f"sweep={name}: configs/sweep/{name}.yaml needs `runs:`, a mapping of labels to "
                            "override lists")
    for label, overrides in sweep.runs.items():
        require([folder_name(f"sweep={name}: run label", label, "<output_dir>/runs/<label>/<timestamp>")])
        budget = [o for o in overrides if setting(o) == "budget"]
        if budget:  # the point of a sweep is the equal budget
            raise CrammingError(f"sweep={name}: run {label} sets {budget[0]}; the budget belongs in `base`, "
                                "the same for every run")


def _unreadable(overrides: list[str]) -> str:
    """Which override Hydra's grammar cannot read, and the quoted form it reads: a value such as a glob with [01]
    in it reads as a list unless quoted."""
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            key, _, value = override.partition("=")
            return f" (in {override!r}: quote the value, {key}='{value}', inside the list's own quotes)"
    return ""


def run_sweep(cfg: AblateConfig) -> Path:
    """Every run of the sweep (finished ones skipped), then <output_dir>/ablations.md and loss_overlay.png."""
    name = HydraConfig.get().runtime.choices["sweep"]
    sweep = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepConfig), cfg.sweep)) \
        if not isinstance(cfg.sweep, SweepConfig) else cfg.sweep
    check_sweep(name, sweep)
    out = Path(cfg.output_dir or f"outputs/ablations/{name}")
    planned = {}  # every run's config composed first, so a bad override fails before any training
    for label, overrides in sweep.runs.items():
        previous = _latest_run(out / "runs" / label)
        if previous and _stop_reason(previous) in FINISHED:
            planned[label] = previous
            continue
        resume = [f"resume={previous}"] if previous and (previous / "checkpoints").is_dir() else []
        everything = [*sweep.base, *overrides, *cfg.overrides, f"name={label}", f"output_dir={out / 'runs'}", *resume]
        try:
            planned[label] = compose("pretrain", overrides=as_group_choices(everything))
        except (HydraException, OmegaConfBaseException) as error:
            raise CrammingError(f"sweep {name}, run {label}: {str(error).splitlines()[0]}{_unreadable(everything)}") \
                from None
    problems = [f"run {label}: {problem}" for label, plan in planned.items() if not isinstance(plan, Path)
                for problem in run_problems(plan)]  # the whole of every run, before the first trains
    if problems:
        raise CrammingError(f"sweep {name}: " + "; ".join(problems))
    run_dirs = {}
    for number, (label, plan) in enumerate(planned.items(), 1):
        if isinstance(plan, Path):
            log.info("[%d/%d] %s: finished before (%s), skipped", number, len(planned), label, plan)
            run_dirs[label] = plan
            continue
        log.info("[%d/%d] %s: %s%s", number, len(planned), label, " ".join(sweep.runs[label]) or "(the base)",
                 " (resuming)" if plan.resume else "")
        offline_if_unreachable(plan)
        run_dirs[label] = pretrain(plan)
    # the table's header names what every run shared: the sweep's base and the command's overrides
    return report(name, SweepConfig(base=[*sweep.base, *cfg.overrides], runs=sweep.runs), run_dirs, out)


def report(name: str, sweep: SweepConfig, run_dirs: dict[str, Path], out: Path) -> Path:
    """<out>/ablations.md and loss_overlay.png, and the table on the console."""
    table = write_table(name, sweep, run_dirs, out / "ablations.md")
    plot = plot_comparison(list(run_dirs.values()), out / "loss_overlay.png", labels=list(run_dirs))
    print("\n" + table)
    print(f"wrote {out / 'ablations.md'} and {plot}")
    return out / "ablations.md"


def _latest_run(label_dir: Path) -> Path | None:
    runs = sorted(p for p in label_dir.glob("*") if p.is_dir() and not p.name.startswith("."))
    return runs[-1] if runs else None


def _stop_reason(run_dir: Path) -> str | None:
    summary = run_dir / "summary.json"
    return read_json_object(summary).get("stop_reason") if summary.is_file() else None


def write_table(name: str, sweep: SweepConfig, run_dirs: dict[str, Path], path: Path) -> str:
    """One row per option: its overrides, final (smoothed) and validation MLM loss, BLiMP and bits per character
    (where the runs measured them: the zero-shot probe, on by default), tokens/s, peak memory, steps, and the GLUE
    score when the runs were scored (`eval=glue` in the sweep or its overrides); then, where options ran with
    several seeds (train.seed), their mean and spread, and how each measure ranks the options."""
    summaries = {label: read_json_object(run_dir / "summary.json") for label, run_dir in run_dirs.items()}
    glue = any("glue_score" in facts for facts in summaries.values())
    zero_shot = any(_measure(facts, "blimp") is not None for facts in summaries.values())
    same_steps = all(facts["stop_reason"] == "max_steps" for facts in summaries.values()) and len(
        {facts["steps"] for facts in summaries.values()}) == 1
    same_budget = not any(setting(o) == "budget" for overrides in sweep.runs.values() for o in overrides)
    equal = ", equal steps" if same_steps else ", equal budget" if same_budget else ""
    extra = " BLiMP (%) | bits/char |" if zero_shot else ""
    rows = [f"Sweep `{name}`{equal}; every run: `{' '.join(sweep.base)}`.", "",
            "| option | overrides | final MLM loss (smoothed) | validation MLM loss |" + extra + " tokens/s "
            f"| peak memory (GB) | steps | stopped |{' GLUE |' if glue else ''}",
            f"|---|---|---|---|{'---|---|' if zero_shot else ''}---|---|---|---|{'---|' if glue else ''}"]
    for label, facts in summaries.items():
        measured = (f" {_number(_measure(facts, 'blimp'), '.2f')} | {_number(_measure(facts, 'bits_per_char'))} |"
                    if zero_shot else "")
        rows.append(f"| {label} | `{' '.join(sweep.runs[label]) or '(base)'}` | {_number(facts['smoothed_loss'])} "
                    f"| {_number(_measure(facts, 'loss'))} |{measured} {_number(facts['mean_tokens_per_s'], '.0f')} "
                    f"| {_number(facts['peak_memory_gb'], '.2f')} | {facts['steps']} | {facts['stop_reason']} |"
                    + (f" {_number(facts.get('glue_score'), '.1f')} |" if glue else ""))
    rows += seed_spread(sweep, summaries, zero_shot)
    table = "\n".join(rows) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, table)
    return table


def _measure(facts: dict, key: str):
    """The final validation figure of a run's summary: loss, blimp or bits_per_char (None where not measured)."""
    validation = facts.get("validation") or {}
    return validation.get("final_loss" if key == "loss" else f"final_{key}")


MEASURES = (("loss", "validation MLM loss", False), ("blimp", "BLiMP (%)", True), ("bits_per_char", "bits/char", False))


def seed_spread(sweep: SweepConfig, summaries: dict[str, dict], zero_shot: bool) -> list[str]:
    """Options that differ only in train.seed, as one row each: mean ± standard deviation over the seeds; and the
    options in order of each measure, best first (where they disagree, the measures disagree on the recipe)."""
    groups: dict[str, list[dict]] = {}
    for label, facts in summaries.items():
        option = " ".join(o for o in sweep.runs[label] if setting(o) != "train.seed") or "(base)"
        groups.setdefault(option, []).append(facts)
    if all(len(runs) < 2 for runs in groups.values()):
        return []
    measures = [m for m in MEASURES if zero_shot or m[0] == "loss"]
    lines = ["", "Over seeds (mean ± standard deviation):", "",
             "| option | runs | " + " | ".join(title for _, title, _ in measures) + " |",
             "|---|---|" + "---|" * len(measures)]
    means = {}
    for option, runs in groups.items():
        cells = []
        for key, _, _ in measures:
            values = [v for facts in runs if (v := _measure(facts, key)) is not None]
            means[option, key] = statistics.fmean(values) if values else None
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{means[option, key]:.4f} ± {spread:.4f}" if values else "n/a")
        lines.append(f"| `{option}` | {len(runs)} | " + " | ".join(cells) + " |")
    lines.append("")
    for key, title, higher in measures:
        ranked = sorted((o for o in groups if means[o, key] is not None), key=lambda o: means[o, key], reverse=higher)
        lines.append(f"Ranked by {title}, best first: " + " > ".join(f"`{o}`" for o in ranked))
    return lines


def _number(value, spec: str = ".4f") -> str:
    return "n/a" if value is None else format(value, spec)
