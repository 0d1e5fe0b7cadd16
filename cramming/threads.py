"""Torch's CPU thread count for a run on the CPU: the cores this process may actually use, and how busy other
processes keep them.

torch counts the machine's cores, not the ones a container's CPU quota or a `taskset` leaves it, and each
thread beyond those waits for a core (on a shared 2-core machine one thread trained 2-4 times the steps of
two). The count is the affinity mask, capped by the cgroup's CPU quota and shared among torchrun's local
ranks; OMP_NUM_THREADS, where set, is the user's choice and wins. The run prints which it is.

A short look at /proc/stat before the run measures the cores other processes keep busy
(CRAMMING_BUSY_CORES=<n> gives the figure instead, as the tests do). Threads are then only as many as the cores
left: a torch thread that waits for a core holds up the others at every synchronization (measured in
docs/benchmarks.md). A busy machine is said at the start and in summary.json with the share of an idle
machine's speed the run can expect: the budget clock charges wall time whatever else runs, which is the recipe's
contract.
"""

import dataclasses
import logging
import math
import os
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"
PROC_STAT = Path("/proc/stat")
BUSY_CORES_ENV = "CRAMMING_BUSY_CORES"
LOOK_S = 0.5  # how long the look at the other processes' load lasts
BUSY_FROM = 0.25  # cores kept busy by others from which the machine counts as busy


def cgroup_cpu_limit(path: Path = CGROUP_CPU_MAX) -> int | None:
    """The cgroup's CPU quota in whole cores (at least 1), or None where there is none."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else max(1, math.floor(int(quota) / int(period)))


def usable_cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return min(cores, limit) if limit else cores


def _cpu_times(cpus: set[int], path: Path = PROC_STAT) -> tuple[int, int] | None:
    """(busy, total) jiffies of the given CPUs so far, or None where /proc/stat is not there to read."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            numbers = [int(value) for value in values[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(numbers)
            busy += sum(numbers) - numbers[3] - numbers[4]
    return (busy, total) if total else None


def busy_cores(seconds: float = LOOK_S, path: Path = PROC_STAT) -> float | None:
    """The usable cores other processes keep busy, measured over `seconds` while this one waits (None: unknown);
    CRAMMING_BUSY_CORES, where set, instead."""
    if os.environ.get(BUSY_CORES_ENV):
        return float(os.environ[BUSY_CORES_ENV])
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    before = _cpu_times(cpus, path)
    time.sleep(seconds)
    after = _cpu_times(cpus, path)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return len(cpus) * (after[0] - before[0]) / (after[1] - before[1])


def expected_share(threads: int, cores: int, busy: float) -> float:
    """The share of an idle machine's speed (all `cores`) that `threads` get beside `busy` cores of other work,
    the scheduler sharing the cores evenly among every runnable thread."""
    per_thread = min(1.0, cores / (threads + busy)) if threads + busy > 0 else 1.0
    return min(threads, cores) * per_thread / cores


@dataclasses.dataclass
class CpuShare:
    """What the start found: the threads chosen, the usable cores, the cores other processes kept busy, and the
    share of an idle machine's speed this run can expect (summary.json's `machine`)."""

    threads: int
    cores: int
    busy_cores: float | None
    expected_speed_share: float | None

    @property
    def busy(self) -> bool:
        return self.busy_cores is not None and self.busy_cores >= BUSY_FROM

    def notice(self) -> str | None:
        if not self.busy:
            return None
        return (f"the machine is busy ({self.busy_cores:.1f} of {self.cores} usable cores in use by other processes);"
                f" this run gets about {100 * self.expected_speed_share:.0f}% of the speed expected on an idle "
                "machine, and the budget clock charges wall time all the same")


def set_cpu_threads() -> CpuShare:
    """Set and print torch's thread count for this process's share of the usable cores, and say whether other
    processes keep them busy."""
    cores, ranks = usable_cores(), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    busy = busy_cores()
    if os.environ.get("OMP_NUM_THREADS"):
        threads, reason = torch.get_num_threads(), "OMP_NUM_THREADS"
    else:
        threads = max(1, cores // ranks)
        shared = f" / {ranks} ranks" if ranks > 1 else ""
        reason = f"{cores} usable core(s){shared}; OMP_NUM_THREADS=<n> sets it"
        if busy is not None and busy >= BUSY_FROM and threads > 1:  # no thread waits on a core others hold
            threads = max(1, min(threads, round((cores - busy) / ranks)))
            reason = (f"{cores} usable core(s){shared}, {busy:.1f} busy with other processes; OMP_NUM_THREADS=<n> "
                      "sets it")
        torch.set_num_threads(threads)
    log.info("cpu: %d torch thread%s (%s)", threads, "" if threads == 1 else "s", reason)
    share = CpuShare(threads, cores, None if busy is None else round(busy, 2),
                     None if busy is None else round(expected_share(threads, cores // ranks, busy / ranks), 3))
    if share.notice():
        log.warning("%s", share.notice())
    global _measured
    _measured = share
    return share


_measured: CpuShare | None = None


def measured_share() -> CpuShare | None:
    """What this process's set_cpu_threads found (None: it did not run, as on a GPU)."""
    return _measured
