"""A finished `pretrain.py -m` sweep read back as an ablation (`scripts/ablate.py multirun=<its directory>`):
the overrides every job shared are the base, each job's swept values its row, its run the numbered
directory's. Hydra's own sweeper lists the jobs again from the sweep's multirun.yaml, so job N is row N."""

from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from cramming.ablate.sweep import SweepConfig, report, setting
from cramming.errors import CrammingError


def tabulate_multirun(directory: str, output_dir: str | None) -> Path:
    """The sweep's table and loss plot in output_dir (null: the sweep's own directory)."""
    sweep, run_dirs = read_multirun(Path(directory))
    return report(f"multirun {Path(directory).name}", sweep, run_dirs, Path(output_dir or directory))


def read_multirun(directory: Path) -> tuple[SweepConfig, dict[str, Path]]:
    """The sweep (base, and each job's label and overrides) and each job's finished run directory."""
    record = directory / "multirun.yaml"
    if not record.is_file():
        raise CrammingError(f"multirun={directory}: no multirun.yaml; name the directory `pretrain.py -m` printed "
                            "(<output_dir>/multirun/<time>)")
    hydra = OmegaConf.load(record).hydra
    parsed = OverridesParser.create().parse_overrides(list(hydra.overrides.task))  # Hydra parsed them before
    shared = [o.input_line for o in parsed if not o.is_sweep_override() and o.key_or_group != "output_dir"]
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()}
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for job in batch]
    base = ([f"--config-name {hydra.job.config_name}"] if hydra.job.config_name != "pretrain" else []) + shared
    runs, run_dirs = {}, {}
    for number, job in enumerate(jobs):
        overrides = [o for o in job if setting(o) in swept]
        label = " ".join(overrides)
        runs[label], run_dirs[label] = overrides, _finished_run(directory / str(number), label)
    return SweepConfig(base=base, runs=runs), run_dirs


def _finished_run(job_dir: Path, label: str) -> Path:
    finished = sorted(summary.parent for summary in job_dir.glob("*/*/summary.json"))
    if not finished:
        raise CrammingError(f"multirun job {job_dir.name} ({label}): no finished run in {job_dir}")
    return finished[-1]
