"""torchrun awareness kept apart from the training loop: this process's place among the ranks, the hand-off
of the prepared data on each machine, and the few collectives training uses.

No rank waits inside a collective on work of unbounded length: NCCL's watchdog aborts a collective after its
timeout (10 minutes by default) and torchrun then stops every rank. So the data is prepared before the
process group exists (each machine's local rank 0 builds it while the others wait on a file with a heartbeat,
`NodeHandoff`), and GLUE runs after the group is gone (cramming.train.trainer).
"""

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil
import torch
import torch.distributed as dist

from cramming.errors import CrammingError
from cramming.files import write_atomically

log = logging.getLogger("pretrain")


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Distributed":
        """This process's place among those torchrun started (rank 0 of 1 without torchrun). Joins nothing:
        `join` does, once the work before the collective part is done."""
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
                   int(os.environ.get("LOCAL_RANK", "0")))

    def join(self, device: torch.device) -> None:
        """The collective part begins: join the process group, nccl bound to this rank's GPU (device_id, so
        the communicator is made for it at once), gloo on CPUs."""
        if not self.enabled or dist.is_initialized():
            return
        if device.type == "cuda":
            dist.init_process_group(backend="nccl", device_id=device)
        else:
            dist.init_process_group(backend="gloo")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def max(self, value: torch.Tensor) -> torch.Tensor:
        """The elementwise maximum over ranks (a new tensor; on the device, no host sync)."""
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value /= self.world_size
        return value

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def average_gradients(self, model: torch.nn.Module) -> None:
        if self.enabled:
            for parameter in model.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)  # gloo has no AVG
                    parameter.grad /= self.world_size

    def broadcast(self, obj):
        """Rank 0's value of a picklable object on every rank."""
        if not self.enabled:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def leave(self) -> None:
        """The collective part ends: the ranks meet once more, then leave the group together. Called right after
        the loop's last collective, so no rank waits long here; rank 0's record and GLUE come after. (Rank 1
        tearing down the group while rank 0 still used it once aborted the run at exit: "terminate called
        without an active exception".)"""
        if self.enabled and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def close(self) -> None:
        """Leave the group without meeting (after an error; a no-op once `leave` ran)."""
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()


class NodeHandoff:
    """One machine's local rank 0 does a piece of work (preparing the data) and hands its result, a string,
    to the machine's other ranks through a file: no collective, so no timeout, however long the work takes.

    While it works, it beats (rewrites the file every `beat_s` seconds); a waiting rank gives up with a
    one-line error when the beat stops for `stale_s` seconds (the worker hung), and stops at once with the
    worker's own message when the work failed. The file is named after torchrun's run id and restart count
    and after the launcher process that started this machine's ranks (their common parent), so no other
    launch ever reads it.
    """

    BEAT_S = 5.0
    STALE_S = 600.0

    def __init__(self, directory: Path, dist_info: Distributed, beat_s: float = BEAT_S, stale_s: float = STALE_S):
        run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
        launcher = psutil.Process(os.getppid())  # torchrun's agent on this machine
        name = (f"{run}-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}-launcher{launcher.pid}-"
                f"{launcher.create_time():.0f}")
        self.path = Path(directory).expanduser() / "handoffs" / f"{name}.json"
        self.enabled, self.is_worker = dist_info.enabled, dist_info.local_rank == 0
        self.beat_s, self.stale_s = beat_s, stale_s

    def run(self, work: Callable[[], str], what: str) -> str:
        """The worker runs `work` and returns its result; every other rank waits for that result. One process
        just works."""
        if not self.enabled:
            return work()
        if self.is_worker:
            return self._work(work, what)
        return self._wait(what)

    def remove(self) -> None:
        """Once every rank has the result (they have joined the process group): the file is no longer needed."""
        if self.enabled and self.is_worker:
            self.path.unlink(missing_ok=True)

    def _write(self, **fields) -> None:
        write_atomically(self.path, json.dumps({**fields, "beat": time.time()}))

    def _work(self, work: Callable[[], str], what: str) -> str:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(state="working")
        finished = threading.Event()

        def beat() -> None:
            while not finished.wait(self.beat_s):
                self._write(state="working")

        beating = threading.Thread(target=beat, name="handoff-heartbeat", daemon=True)
        beating.start()
        try:
            result = work()
        except BaseException as error:
            finished.set()
            beating.join()
            self._write(state="failed", error=" ".join(str(error).split()) or type(error).__name__)
            raise
        finished.set()
        beating.join()
        self._write(state="done", result=result)
        return result

    def _wait(self, what: str) -> str:
        started, told = time.time(), time.time()
        while True:
            record = self._read()
            now = time.time()
            if record is not None:
                if record["state"] == "done":
                    return record["result"]
                if record["state"] == "failed":
                    raise CrammingError(f"local rank 0 stopped {what}: {record['error']}")
                if now - record["beat"] > self.stale_s:
                    raise CrammingError(f"local rank 0 stopped {what} without a word: no heartbeat in {self.path} "
                                        f"for {now - record['beat']:.0f} s")
            elif now - started > self.stale_s:
                raise CrammingError(f"local rank 0 never started {what}: no {self.path} after {self.stale_s:.0f} s")
            if now - told >= 60:
                log.info("rank waiting for local rank 0 %s (%.0f s so far)", what, now - started)
                told = now
            time.sleep(min(1.0, self.beat_s))

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):  # not written yet (or replaced at this instant): look again
            return None
