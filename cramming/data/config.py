"""Typed schema of the Hydra group `data`: every key here is used, any other key is rejected."""

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class NormalizeConfig:
    """Text normalization, applied inside the tokenizer so pretraining and GLUE see the same text."""

    nfkc: bool = True
    lowercase: bool = True
    strip_accents: bool = True
    ascii_only: bool = False  # drop every character outside 7-bit ASCII


@dataclass
class FilterConfig:
    """Document filters; each one counts what it dropped."""

    min_chars: int = 32  # drop documents with fewer characters
    trash_cutoff: Optional[float] = 0.3  # drop documents with more tokens per character; null disables
    deduplicate: bool = True  # drop exact repeats (by content hash)
    max_bad_char_fraction: float = 0.01  # drop documents whose text is this much U+FFFD/NUL (binary, bad bytes)
    # drop documents whose word 5-grams overlap a kept one's by this Jaccard similarity (MinHash LSH,
    # cramming.data.near_dedup); null: off
    near_dedup_threshold: Optional[float] = None


@dataclass
class TokenizerConfig:
    kind: str = "wordpiece"  # wordpiece | bpe | unigram
    vocab_size: int = 32768
    min_frequency: int = 2
    train_sample_mb: float = 16.0  # the tokenizer is trained on the first this-many MB of kept text


@dataclass
class DataConfig:
    name: str = MISSING
    source: str = MISSING  # embedded | local | hub
    # local: a path or glob, or a list of them (.txt, .txt.gz, .jsonl[.gz], .parquet)
    files: Any = None
    # hub: load_dataset(hub_path, hub_name, split=split, streaming=streaming)
    hub_path: Optional[str] = None
    hub_name: Optional[str] = None
    split: str = "train"
    streaming: bool = True
    text_column: str = "text"
    # text files: one document per line, per blank-line-separated paragraph, or per file
    sample_by: str = "paragraph"
    max_documents: Optional[int] = None  # stop after this many documents read (large hub corpora)
    max_doc_chars: int = 1_000_000  # longer documents are cut into pieces, packed back to back
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    seq_length: int = 128
    ordering: str = "shuffle"  # shuffle | frequency_curriculum | corpus
    seed: int = 0
    # The last rows of the stored order, never trained on: the validation curve's slice (at most a quarter
    # of the rows; 0: no validation). Part of the cache key, so every run on this dataset sees the same.
    validation_rows: int = 256
    # Execution only (not part of the cache key): batch size of text handed to the tokenizer.
    batch_mb: float = 2.0


ConfigStore.instance().store(group="data", name="schema", node=DataConfig)


@dataclass
class PrepareDataConfig:
    """Top level of `scripts/prepare_data.py`."""

    data: DataConfig = MISSING
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"  # prepared datasets go to <cache_dir>/data


ConfigStore.instance().store(name="prepare_data_schema", node=PrepareDataConfig)
