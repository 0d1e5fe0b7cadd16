"""A disk that fills up while training, on a real small filesystem (a size-limited tmpfs, which only root may
mount; skipped otherwise): the one line names the write that failed first and the space left, the failed
checkpoint leaves no partial copy, the previous checkpoint is untouched, nothing more is written, and the
run resumes in place once there is room."""

import errno
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import cramming.preflight.checks

from cramming.errors import describe_os_error
from cramming.files import WriteFailed, write_atomically
from cramming.model.checkpoint import load_pretrained, save_pretrained
from cramming.train.reporting import MetricsLog, StepFacts
from tests.commands import in_process, in_subprocess

ROOMY = 64 * 2**20


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A tmpfs of ROOMY bytes at tmp_path/disk, for resizing with `resize`; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs is mounted only as root; run as root to test a full disk")
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={ROOMY}", "tmpfs", str(mount)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no `mount` command here to make a size-limited tmpfs")
    if made.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True, capture_output=True)


def hashes(directory: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_a_full_disk_stops_at_the_failed_checkpoint_and_the_run_resumes_in_place(shared_cache, small_disk,
                                                                                  straight_run, monkeypatch):
    run_dir = small_disk / "out" / "t" / straight_run.name  # as if it had stopped after step 6
    shutil.copytree(straight_run, run_dir, ignore=lambda folder, names: [
        name for name in names if name in ("plots", "summary.json")
        or (Path(folder).name == "checkpoints" and name != "step-00000006")])
    previous = run_dir / "checkpoints" / "step-00000006"
    before = hashes(previous)
    checkpoint_bytes = sum(path.stat().st_size for path in previous.iterdir())
    resize(small_disk, shutil.disk_usage(small_disk).used + checkpoint_bytes // 2)  # not another checkpoint

    refused = in_subprocess("pretrain", f"resume={run_dir}")  # the start sees that its checkpoints cannot fit
    assert refused.returncode == 2 and "Traceback" not in refused.stderr + refused.stdout
    assert refused.stderr.startswith("error: disk: the run needs about ") and "checkpoint.keep_last=" in refused.stderr
    assert not (run_dir / "checkpoints" / "step-00000007").exists() and hashes(previous) == before

    # the disk fills after the start (another writer): the start's check passes, the checkpoint's write fails
    monkeypatch.setattr(cramming.preflight.checks, "check_disk", lambda needs: None)
    run = in_process("pretrain", f"resume={run_dir}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    last = run.stderr.strip().splitlines()[-1]
    failed = run_dir / "checkpoints" / "step-00000007"
    assert last.startswith(f"error: cannot write the checkpoint {failed}: No space left on device ("), last
    assert " free of " in last and last.endswith(
        f" in {run_dir / 'checkpoints'}); its partial copy is removed; the newest complete checkpoint is "
        f"{previous}: free some space, then run the same command with resume={run_dir}")
    assert [path.name for path in run_dir.rglob("*") if ".tmp" in path.name] == []
    assert hashes(previous) == before
    assert not (run_dir / "summary.json").exists() and not (run_dir / "plots").exists()  # nothing after it

    resize(small_disk, ROOMY)  # space freed: the same command goes on in place
    again = in_process("pretrain", f"resume={run_dir}")
    assert again.returncode == 0, again.stderr
    assert (run_dir / "checkpoints" / "final").is_dir() and (run_dir / "summary.json").is_file()
    assert [path.name for path in (small_disk / "out" / "t").iterdir()] == [run_dir.name]


def test_a_full_disk_while_writing_the_weights_is_the_os_error_it_is(small_disk, straight_run):
    """safetensors reports a full disk as its own error type: it reaches the user as the OSError it is, named
    after the file, so the one line can say it and the space left."""
    model, tokenizer = load_pretrained(straight_run / "checkpoints" / "final")
    resize(small_disk, 1024 * 1024)  # the tokenizer fits, the weights do not
    with pytest.raises(OSError) as error:
        save_pretrained(model, small_disk / "ckpt", tokenizer)
    assert error.value.errno == errno.ENOSPC
    assert error.value.filename == str(small_disk / "ckpt" / "model.safetensors")


def test_any_other_write_on_a_full_disk_names_its_file_and_the_space_left(small_disk):
    resize(small_disk, 1024 * 1024)
    with pytest.raises(WriteFailed) as error:  # the space when it failed, before the partial copy went
        write_atomically(small_disk / "summary.json", "x" * 2 * 1024 * 1024)
    assert str(error.value) == (f"cannot write {small_disk / 'summary.json'}: No space left on device (0 B "
                                f"free of 1.05 MB in {small_disk}); its partial copy is removed")
    assert list(small_disk.iterdir()) == []
    metrics = MetricsLog(small_disk / "metrics.jsonl", None, 0, 1.0, None)
    (small_disk / "filler").write_bytes(b"x" * shutil.disk_usage(small_disk).free)  # the disk, full
    facts = StepFacts(step=1, microbatches=1, tokens=128, elapsed=1.0, remaining=1.0, budget_fraction=0.5,
                      loss=9.0, lr=1e-3, batch_size=1, nonfinite=0, grad_norm=1.0, clipped_fraction=None,
                      telemetry={})
    with pytest.raises(OSError) as error:  # a record appended to metrics.jsonl
        metrics.record(facts)
    assert describe_os_error(error.value) == (f"cannot use {small_disk / 'metrics.jsonl'}: No space left on "
                                              f"device (0 B free of 1.05 MB in {small_disk})")
