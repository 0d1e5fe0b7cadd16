"""Torch's CPU thread count for a run on the CPU: the cores this process may actually use.

torch counts the machine's cores, not the ones a container's CPU quota or a `taskset` leaves it, and each
thread beyond those waits for a core (on a shared 2-core machine one thread trained 2-4 times the steps of
two). The count is the affinity mask, capped by the cgroup's CPU quota and shared among torchrun's local
ranks; OMP_NUM_THREADS, where set, is the user's choice and wins. The run prints which it is.
"""

import logging
import math
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


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


def set_cpu_threads() -> int:
    """Set and print torch's thread count for this process's share of the usable cores."""
    if os.environ.get("OMP_NUM_THREADS"):
        threads, reason = torch.get_num_threads(), "OMP_NUM_THREADS"
    else:
        cores, ranks = usable_cores(), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads = max(1, cores // ranks)
        torch.set_num_threads(threads)
        shared = f" / {ranks} ranks" if ranks > 1 else ""
        reason = f"{cores} usable core(s){shared}; OMP_NUM_THREADS=<n> sets it"
    log.info("cpu: %d torch thread%s (%s)", threads, "" if threads == 1 else "s", reason)
    return threads
