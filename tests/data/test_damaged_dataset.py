"""A prepared dataset whose files a full disk or a crash left damaged: every file of it truncated, overwritten with
bytes that are not its format, and replaced by a value of the wrong type. Each damage goes through the three
commands that read the cache at their start: `prepare_data.py` and `pretrain.py` rebuild it and say so,
`pretrain.py preflight=true` plans its rebuild and writes nothing; none ends in a traceback, and no command
trusts the damaged file (the rebuilt rows are the rows first prepared)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cramming.data import store
from tests.test_bad_inputs import run_command
from tests.train.runs import STEP_RUN, TINY_DATA


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """The tiny runs' dataset, prepared once: its cache directory."""
    cache = tmp_path_factory.mktemp("damaged") / "cache"
    code, output = run_command("prepare_data", *TINY_DATA, f"cache_dir={cache}")
    assert code == 0, output
    return cache


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def not_its_format(path: Path) -> None:
    """The same size, other bytes: a block of zeros or of another file, as a crash mid-write leaves."""
    path.write_bytes(b"\0" * path.stat().st_size)


def wrong_types(path: Path) -> None:
    """Valid in its format, with values of another type: meta.json's numbers as strings (its own checksum
    recomputed, so only the type check can tell), tokenizer.json a list, arrays of floats of the same size,
    rows of token ids past the vocabulary."""
    if path.name == store.META_FILE:
        meta = json.loads(path.read_text())
        meta.update(num_rows=str(meta["num_rows"]), bytes={name: str(size) for name, size in meta["bytes"].items()})
        meta["meta_sha256"] = store.meta_sha256(meta)
        path.write_text(json.dumps(meta))
    elif path.name == store.TOKENIZER_FILE:
        size = path.stat().st_size
        path.write_text(json.dumps(list(range(size)))[: size - 1] + "]")
    elif path.suffix == ".npy":
        array = np.load(path)
        np.save(path, array.astype(np.float32 if array.itemsize == 4 else np.float64))
    else:
        np.full(path.stat().st_size // 2, 65535, dtype=np.uint16).tofile(path)


FILES = [store.META_FILE, *store.HASHED_FILES]
DAMAGES = [truncated, not_its_format, wrong_types]
CASES = [(name, damage) for name in FILES for damage in DAMAGES]


def damaged_cache(prepared: Path, tmp_path: Path, name: str, damage) -> tuple[Path, Path, bytes]:
    """A copy of the prepared cache with `damage` done to the file `name`: (cache, dataset, the damaged bytes)."""
    cache = tmp_path / "cache"
    shutil.copytree(prepared, cache)
    (dataset,) = (path.parent for path in (cache / "data").glob("*/meta.json"))
    damage(dataset / name)
    return cache, dataset, (dataset / name).read_bytes()


def original_rows(prepared: Path) -> np.ndarray:
    (rows,) = (prepared / "data").glob(f"*/{store.ROWS_FILE}")
    return np.fromfile(rows, dtype=np.uint16)


@pytest.mark.parametrize(("name", "damage"), CASES, ids=[f"{n}-{d.__name__}" for n, d in CASES])
def test_prepare_data_rebuilds_a_damaged_dataset(prepared, tmp_path, name, damage):
    cache, dataset, _ = damaged_cache(prepared, tmp_path, name, damage)
    code, output = run_command("prepare_data", *TINY_DATA, f"cache_dir={cache}")
    assert code == 0 and "Traceback" not in output, output
    assert "rebuilding it" in output and "prepared now" in output, output
    assert np.array_equal(np.fromfile(dataset / store.ROWS_FILE, dtype=np.uint16), original_rows(prepared))
    store.PreparedDataset.open(dataset, verify_hashes=True)


@pytest.mark.parametrize(("name", "damage"), CASES, ids=[f"{n}-{d.__name__}" for n, d in CASES])
def test_pretrain_rebuilds_a_damaged_dataset_and_trains(prepared, tmp_path, name, damage):
    cache, dataset, _ = damaged_cache(prepared, tmp_path, name, damage)
    code, output = run_command("pretrain", *STEP_RUN, "train.max_steps=1",
                               f"cache_dir={cache}", f"output_dir={tmp_path / 'out'}")
    assert code == 0 and "Traceback" not in output, output
    assert f"data: {dataset} (prepared," in output and "done: 1 steps" in output, output  # not "(reused"
    assert np.array_equal(np.fromfile(dataset / store.ROWS_FILE, dtype=np.uint16), original_rows(prepared))


@pytest.mark.parametrize(("name", "damage"), CASES, ids=[f"{n}-{d.__name__}" for n, d in CASES])
def test_preflight_with_a_damaged_dataset_plans_its_rebuild_and_writes_nothing(prepared, tmp_path, name, damage):
    """preflight reads meta.json verified and every file's size; a same-size file of other bytes is found by its
    hash when the run opens the dataset (above), so the plan may still count it as cached."""
    cache, dataset, damaged = damaged_cache(prepared, tmp_path, name, damage)
    code, output = run_command("pretrain", *STEP_RUN, "preflight=true", f"cache_dir={cache}",
                               f"output_dir={tmp_path / 'out'}")
    assert code == 0 and "Traceback" not in output, output
    assert (dataset / name).read_bytes() == damaged and not (tmp_path / "out").exists()
    disk_line = next(line for line in output.splitlines() if "disk: the prepared dataset" in line)
    if name == store.META_FILE or damage is truncated:
        assert f"its cached copy in {dataset} is damaged and will be rebuilt" in disk_line, disk_line
