"""Run a command as one rank under torchrun, in the conditions a test needs, the command itself unchanged:
`torchrun ... tests/rank_shim.py pretrain.py [args...]`, conditions set by environment variables.

CRAMMING_TEST_GROUP_TIMEOUT_S=<s>       every process group's collectives time out after s seconds (torch's
                                        default is 30 minutes for gloo, 10 for NCCL)
CRAMMING_TEST_SLOW_RANK0=<where>:<s>,.. rank 0 sleeps s seconds more inside <where>: `prepare` (the data
                                        preparation), `glue` (GLUE after pretraining)
CRAMMING_TEST_SYNCS=<path>              host syncs of each training-loop iteration, written to <path>.rank<r>.json
                                        as [[step, syncs], ...] (cramming.bench.host_sync's counter)
"""

import datetime
import functools
import json
import os
import runpy
import sys
import time

RANK = int(os.environ.get("RANK", "0"))


def force_group_timeout(seconds: float) -> None:
    import torch.distributed as dist

    join = dist.init_process_group

    @functools.wraps(join)
    def join_with_timeout(*args, **kwargs):
        return join(*args, **{**kwargs, "timeout": datetime.timedelta(seconds=seconds)})

    dist.init_process_group = join_with_timeout


def slow_down(module_name: str, function_name: str, seconds: float) -> None:
    """Rank 0's `module.function` takes `seconds` longer (patched before any caller imports it by name)."""
    import importlib

    module = importlib.import_module(module_name)
    original = getattr(module, function_name)

    @functools.wraps(original)
    def slower(*args, **kwargs):
        if RANK == 0:
            time.sleep(seconds)
        return original(*args, **kwargs)

    setattr(module, function_name, slower)


def count_loop_syncs(path: str) -> None:
    """The training loop runs inside the host-sync counter; each step's entry notes the count so far, so the
    differences are the syncs of one iteration (the step, its callbacks, the decision to go on)."""
    from cramming.bench.host_sync import HostSyncCounter
    from cramming.train import loop

    marks, train_step, run_loop = [], loop.train_step, loop.run_loop

    def noted_step(state, *args):
        marks.append((state.progress.step + 1, sum(counter.syncs.values())))
        return train_step(state, *args)

    def counted_loop(*args, **kwargs):
        loop.train_step = noted_step
        try:
            with counter:
                reason = run_loop(*args, **kwargs)
        finally:
            loop.train_step = train_step
        iterations = [[step_number, later - earlier] for (step_number, earlier), (_, later) in zip(marks, marks[1:])]
        with open(f"{path}.rank{RANK}.json", "w") as file:
            json.dump(iterations, file)
        return reason

    counter = HostSyncCounter()
    loop.run_loop = counted_loop


def main() -> None:
    script, *arguments = sys.argv[1:]
    if os.environ.get("CRAMMING_TEST_GROUP_TIMEOUT_S"):
        force_group_timeout(float(os.environ["CRAMMING_TEST_GROUP_TIMEOUT_S"]))
    places = {"prepare": ("cramming.data.prepare", "prepare_dataset"), "glue": ("cramming.eval.run", "run_glue")}
    for condition in filter(None, os.environ.get("CRAMMING_TEST_SLOW_RANK0", "").split(",")):
        where, seconds = condition.split(":")
        slow_down(*places[where], float(seconds))
    if os.environ.get("CRAMMING_TEST_SYNCS"):
        count_loop_syncs(os.environ["CRAMMING_TEST_SYNCS"])
    sys.argv = [script, *arguments]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
