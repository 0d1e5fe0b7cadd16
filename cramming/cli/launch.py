"""Several processes, checked before they start: `python scripts/launch.py` or `cramming-launch`, with
torchrun's own arguments.

    python scripts/launch.py --nproc_per_node=4 pretrain.py budget=24 gpu=a100

torchrun reports a process that failed with a traceback of its own and exit code 1, whatever the process
said and returned. Here the pretraining command is first checked as its processes will check it (the
overrides, the config's values, a GPU for each local process): a problem is one line and exit code 2
before any process starts. A process that fails later ends the launch with one line and the process's own
exit code; the process's error is printed above it.
"""

import sys
from pathlib import Path

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import determine_local_world_size, parse_args, parse_min_max_nnodes, run

from cramming import compose_config
from cramming.cli import check_arguments
from cramming.cli.arguments import job_overrides, parse_arguments
from cramming.cli.pretrain import checked_job
from cramming.errors import CrammingError, exit_on_user_error, fail
from cramming.pretraining import PretrainConfig
from cramming.train.settings import resolve_settings

PRETRAINING = ("pretrain.py", "cramming.cli.pretrain", "cramming-pretrain")  # the script, -m module, command


@exit_on_user_error
def check_pretraining(arguments: list[str], processes: int, world_size: int | None) -> None:
    """What each local process of `pretrain.py <arguments>` checks before its data is prepared (world_size:
    None when other nodes join)."""
    check_arguments(arguments, "pretrain", PretrainConfig)
    parsed = parse_arguments(arguments, "pretrain")
    for overrides in job_overrides(parsed) if parsed.composes else []:
        cfg = checked_job(compose_config(parsed.config_name, overrides), overrides, parsed.config_name, world_size)
        if cfg.preflight:
            raise CrammingError("preflight=true checks a run in one process: python pretrain.py ... preflight=true")
        if resolve_settings(cfg, 0).device.type == "cuda" and torch.cuda.device_count() < processes:
            raise CrammingError(f"--nproc_per_node={processes}: each process trains on a GPU of its own and this "
                                f"machine has {torch.cuda.device_count()}")


@exit_on_user_error
def check_launch(nproc_per_node: str, nnodes: str) -> int:
    """torchrun's own process and machine counts, which it would meet with an assertion's traceback; the
    number of local processes."""
    try:
        processes = determine_local_world_size(nproc_per_node)
    except ValueError as error:  # --nproc_per_node=gpu without one, or a word torchrun does not know
        raise CrammingError(f"--nproc_per_node={nproc_per_node}: {error}") from None
    if processes < 1:
        raise CrammingError(f"--nproc_per_node={nproc_per_node}: start at least 1 process")
    try:
        fewest, most = parse_min_max_nnodes(nnodes)
    except (ValueError, RuntimeError):
        fewest = most = 0
    if not 0 < fewest <= most:
        raise CrammingError(f"--nnodes={nnodes}: give the number of machines (at least 1), or MIN:MAX with "
                            "1 <= MIN <= MAX")
    return processes


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    processes = check_launch(args.nproc_per_node, args.nnodes)
    if Path(args.training_script).name in PRETRAINING:
        check_pretraining(args.training_script_args, processes, processes if args.nnodes in ("1", "1:1") else None)
    try:
        run(args)
    except ValueError as error:  # torchrun's own set-up, before any process: an unknown rendezvous backend
        fail(f"torchrun could not start the processes: {error}")
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        code = failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode  # signal N: 128 + N
        fail(f"{args.training_script} stopped on rank {rank} with exit code {failure.exitcode}, its error above "
             f"({len(failed.failures)} process(es) failed)", code)


if __name__ == "__main__":
    main()
