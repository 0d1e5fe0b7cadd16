"""The prepared-dataset cache: one directory per (data config, tokenizer config, source, format version).

A directory is built under a temporary name and renamed into place only when complete, so an
interrupted or failed preparation never leaves anything a later run would trust.
"""

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from cramming.data.config import FilterConfig, TokenizerConfig
from cramming.data.sources import DataConfig
from cramming.errors import CrammingError
from cramming.files import read_json_object

FORMAT_VERSION = 2  # 2: deterministic tokenizer training
EXECUTION_ONLY_KEYS = ("batch_mb",)  # change how fast, not what is produced
# The keys the first cache keys hashed, by group. A key added since is left out of the key while it holds its
# default, which must reproduce what was prepared before the key existed: the datasets prepared before it still
# match, and a new key needs no line here.
FIRST_DATA_KEYS = ("name", "source", "files", "hub_path", "hub_name", "split", "streaming", "text_column",
                   "sample_by", "max_documents", "max_doc_chars", "normalize", "filter", "tokenizer", "seq_length",
                   "ordering", "seed", "validation_rows")
FIRST_FILTER_KEYS = ("min_chars", "trash_cutoff", "deduplicate", "max_bad_char_fraction")
FIRST_TOKENIZER_KEYS = ("kind", "vocab_size", "min_frequency", "train_sample_mb")
ROWS_FILE, ORDER_FILE, COUNTS_FILE, TOKENIZER_FILE, META_FILE = (
    "rows.bin",
    "order.npy",
    "token_counts.npy",
    "tokenizer.json",
    "meta.json",
)
HASHED_FILES = (ROWS_FILE, ORDER_FILE, COUNTS_FILE, TOKENIZER_FILE)  # every file but meta.json, which holds
# their hashes and sizes, and its own hash (`meta_sha256`)


def cache_key(cfg: DataConfig, source_fingerprint: dict) -> str:
    settings = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    for key in EXECUTION_ONLY_KEYS:
        settings.pop(key)
    for group, schema, first in ((settings["filter"], FilterConfig, FIRST_FILTER_KEYS),
                                 (settings, DataConfig, FIRST_DATA_KEYS),
                                 (settings["tokenizer"], TokenizerConfig, FIRST_TOKENIZER_KEYS)):
        defaults = _defaults(schema)
        for key in [key for key in group if key not in first and group[key] == defaults[key]]:
            group.pop(key)
    blob = json.dumps({"format": FORMAT_VERSION, "data": settings, "source": source_fingerprint}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _defaults(schema: type) -> dict:
    """Each field's default as the cache key sees it (plain values, lists and dicts)."""
    return {field.name: field.default if field.default is not dataclasses.MISSING else field.default_factory()
            for field in dataclasses.fields(schema)}


def dataset_dir(cache_dir: str, cfg: DataConfig, key: str) -> Path:
    return Path(os.path.expanduser(cache_dir)) / "data" / f"{cfg.name}-{key}"


def meta_sha256(meta: dict) -> str:
    """meta.json's own checksum: of its content without the `meta_sha256` field, in a canonical form."""
    content = {key: value for key, value in meta.items() if key != "meta_sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path, chunk_bytes: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


META_TYPES = {"format_version": int, "meta_sha256": str, "config": dict, "seq_length": int, "vocab_size": int,
              "num_rows": int, "tokens_packed": int, "sha256": dict, "bytes": dict}  # what readers index


def read_meta(path: str | Path) -> dict:
    """The meta.json of the dataset directory `path`, verified: JSON, an object of this format, its own
    SHA-256 matching, the fields readers use of their types. Every reader of a cached dataset's meta.json
    comes through here; anything else is a CrammingError naming the file (truncated, corrupt, stale, changed)."""
    file = Path(path) / META_FILE
    try:
        meta = read_json_object(file)
    except FileNotFoundError:
        raise CrammingError(f"no prepared dataset at {path} (meta.json missing)") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise CrammingError(f"{path} has format {meta.get('format_version')}, expected {FORMAT_VERSION}")
    if "meta_sha256" not in meta:
        raise CrammingError(f"{path} was prepared before meta.json carried its own SHA-256")
    if meta["meta_sha256"] != meta_sha256(meta):
        raise CrammingError(f"{file} does not match the SHA-256 recorded when it was prepared: the dataset was "
                            "changed or damaged")
    wrong = [key for key, kind in META_TYPES.items() if type(meta.get(key)) is not kind]  # (a bool is no int)
    sizes = meta["bytes"] if isinstance(meta.get("bytes"), dict) else {}
    wrong += [f"bytes.{name}" for name in HASHED_FILES if name != ROWS_FILE and type(sizes.get(name)) is not int]
    if wrong:
        raise CrammingError(f"{file}: {', '.join(wrong)} missing or of the wrong type: the dataset is damaged")
    return meta


def cached_dataset(final_dir: Path) -> "PreparedDataset | None":
    """The dataset the cache holds in `final_dir` if it opens (meta.json verified, every file of its size);
    None where it is absent or damaged, which the preparation then rebuilds. For what reads the cache before
    the preparation does (the start's checks, the disk estimate): nothing damaged is trusted, and nothing is
    refused that the preparation would repair."""
    if not (final_dir / META_FILE).exists():
        return None
    try:
        return PreparedDataset.open(final_dir)
    except CrammingError:
        return None


@dataclass
class PreparedDataset:
    """A finished dataset directory: rows (memory-mapped), their training order, and the tokenizer."""

    path: Path
    meta: dict

    @classmethod
    def open(cls, path: str | Path, verify_hashes: bool = False) -> "PreparedDataset":
        """Open a complete dataset directory; CrammingError if it is missing, partial, stale or damaged.

        meta.json (read_meta) and every file's size are checked on every open; with verify_hashes, every
        file's SHA-256 too, and every token id against the vocabulary (a meta.json that does not fit its
        rows would crash training in the embedding).
        """
        path = Path(path)
        meta = read_meta(path)
        for name in HASHED_FILES:
            if not (path / name).is_file():
                raise CrammingError(f"{path / name} is missing: the dataset is damaged")
            size = (path / name).stat().st_size
            expected = meta["bytes"][name] if name != ROWS_FILE else meta["num_rows"] * meta["seq_length"] * 2
            if size != expected:
                raise CrammingError(f"{path / name} has {size} bytes, expected {expected}: the dataset is damaged")
        dataset = cls(path, meta)
        if verify_hashes:
            for name in HASHED_FILES:
                if not dataset.hash_matches(name):
                    raise CrammingError(f"{path / name} does not match the SHA-256 recorded when it was prepared: "
                                        "the dataset was changed or damaged")
            dataset.check_token_ids()
        return dataset

    def hash_matches(self, name: str) -> bool:
        """Whether the file `name` of the dataset still has the SHA-256 recorded when it was prepared."""
        return file_sha256(self.path / name) == self.meta["sha256"].get(name)

    def check_token_ids(self) -> None:
        """Every token id in the rows below meta.json's vocab_size, the size of the model's embedding."""
        largest = int(self.rows().max()) if self.num_rows else -1
        if largest >= self.meta["vocab_size"]:
            raise CrammingError(f"{self.path / ROWS_FILE} holds token id {largest}, but {self.path / META_FILE} "
                                f"says vocab_size {self.meta['vocab_size']}: the dataset is inconsistent")

    @property
    def num_rows(self) -> int:
        return self.meta["num_rows"]

    @property
    def seq_length(self) -> int:
        return self.meta["seq_length"]

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE

    def rows(self) -> np.ndarray:
        """All rows, (num_rows, seq_length) uint16, memory-mapped read-only."""
        return np.memmap(self.path / ROWS_FILE, dtype=np.uint16, mode="r", shape=(self.num_rows, self.seq_length))

    def order(self) -> np.ndarray:
        return np.load(self.path / ORDER_FILE, mmap_mode="r")

    def token_counts(self) -> np.ndarray:
        """How often each token id occurs in the packed rows, (vocab_size,) int64, counted while they were packed."""
        return np.load(self.path / COUNTS_FILE)

    @property
    def held_out_rows(self) -> int:
        """Rows at the end of the stored order that training never reads (data.validation_rows, at most a
        quarter of the rows, so a small corpus still trains on most of itself)."""
        return min(self.meta["config"].get("validation_rows", 0), self.num_rows // 4)

    @property
    def training_rows(self) -> int:
        return self.num_rows - self.held_out_rows


def remove_stale_builds(final_dir: Path) -> None:
    """Delete temporary build directories of this dataset left by processes that no longer exist."""
    for stale in final_dir.parent.glob(f".{final_dir.name}.tmp-*"):
        pid = int(stale.name.rsplit("-", 1)[1])
        if not _process_alive(pid):
            shutil.rmtree(stale, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def temporary_dir(final_dir: Path) -> Path:
    tmp = final_dir.parent / f".{final_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, final_dir: Path) -> None:
    """Atomically move a finished build into place (another process may have finished first)."""
    try:
        os.rename(tmp, final_dir)
    except OSError:
        if (final_dir / META_FILE).exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise
