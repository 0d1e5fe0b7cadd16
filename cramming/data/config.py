"""The keys of the Hydra group `data` that every source shares (DataBaseConfig): every key here is used, any
other key is rejected, and each part checks its values (`check`). The allowed choices of the keys are declared
here (the vocabulary's bounds in cramming.data.vocab, below), and the code that acts on a key reads them from
here: this module imports nothing else of the data package.

A source declares its own keys in its file (`settings`) and checks them (cramming.data.source_base, above);
cramming.data.sources adds them to these in the group's schema, DataConfig, and `check_data_config` checks the
source's keys first, then calls `DataBaseConfig.check`."""

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from cramming.data.vocab import MAX_VOCAB_SIZE, SPECIAL_TOKENS
from cramming.errors import problems_of, raise_problems, require
from cramming.files import folder_name

TRASH_SCALINGS = ("none", "median")  # data.filter.trash_cutoff_scaling (cramming.data.filters.trash_cutoff)
TRAINED_KINDS = ("wordpiece", "bpe", "unigram")  # trained on the corpus
TOKENIZER_KINDS = (*TRAINED_KINDS, "pretrained")  # pretrained: cramming.data.pretrained_tokenizer
ORDERINGS = (  # data.ordering (cramming.data.ordering.row_order)
    "shuffle",
    "corpus",
    "frequency_curriculum",
    "reverse_frequency_curriculum",
    "length_curriculum",
    "reverse_length_curriculum",
)


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
    # none: trash_cutoff is tokens per character. median: trash_cutoff is a multiple (>= 1, e.g. 1.3) of the
    # corpus's median ratio, measured with the trained tokenizer on its training sample, so the same value
    # drops alike at any vocabulary size (docs/data.md)
    trash_cutoff_scaling: str = "none"
    deduplicate: bool = True  # drop exact repeats (by content hash)
    max_bad_char_fraction: float = 0.01  # drop documents whose text is this much U+FFFD/NUL (binary, bad bytes)
    # drop documents whose word 5-grams overlap a kept one's by this Jaccard similarity (MinHash LSH,
    # cramming.data.near_dedup); null: off
    near_dedup_threshold: Optional[float] = None

    def check(self) -> None:
        cutoff, scaling = self.trash_cutoff, self.trash_cutoff_scaling
        require([
            (self.min_chars >= 0, f"data.filter.min_chars={self.min_chars} must not be negative"),
            (cutoff is None or cutoff > 0, f"data.filter.trash_cutoff={cutoff} must be null or positive"),
            (scaling in TRASH_SCALINGS,
             f"data.filter.trash_cutoff_scaling={scaling!r} is unknown; choose one of {', '.join(TRASH_SCALINGS)}"),
            (scaling != "median" or cutoff is not None,
             "data.filter.trash_cutoff_scaling=median needs data.filter.trash_cutoff=<a multiple of the median, e.g. "
             "1.3>"),
            (scaling != "median" or cutoff is None or cutoff >= 1,
             f"data.filter.trash_cutoff={cutoff} with trash_cutoff_scaling=median is a multiple of the corpus's "
             "median tokens per character and must be at least 1 (e.g. 1.3); below 1 it drops most documents"),
            (0 <= self.max_bad_char_fraction <= 1,
             f"data.filter.max_bad_char_fraction={self.max_bad_char_fraction} must be in [0, 1]"),
            (self.near_dedup_threshold is None or 0 < self.near_dedup_threshold <= 0.98,  # LSH needs 2+ bands
             f"data.filter.near_dedup_threshold={self.near_dedup_threshold} must be in (0, 0.98] (null: off)"),
        ])


@dataclass
class TokenizerConfig:
    # wordpiece | bpe | unigram (trained on the corpus) | pretrained (`name`'s tokenizer: its vocabulary and
    # normalization; vocab_size, min_frequency, train_sample_mb and data.normalize then do not apply)
    kind: str = "wordpiece"
    name: Optional[str] = None  # kind=pretrained: a hub id (e.g. bert-base-uncased) or a local tokenizer folder
    vocab_size: int = 32768
    min_frequency: int = 2
    train_sample_mb: float = 16.0  # the tokenizer is trained on the first this-many MB of kept text

    def check(self) -> None:
        require([
            (self.kind in TOKENIZER_KINDS,
             f"data.tokenizer.kind={self.kind!r} is unknown; choose one of {', '.join(TOKENIZER_KINDS)}"),
            (self.kind != "pretrained" or bool(self.name),
             "data.tokenizer.kind=pretrained needs data.tokenizer.name=<a hub id such as bert-base-uncased, or a "
             "folder>"),
            (self.kind == "pretrained" or self.name is None,
             f"data.tokenizer.name={self.name} is read only with data.tokenizer.kind=pretrained"),
            (len(SPECIAL_TOKENS) < self.vocab_size <= MAX_VOCAB_SIZE,
             f"data.tokenizer.vocab_size={self.vocab_size} must be between {len(SPECIAL_TOKENS) + 1} and "
             f"{MAX_VOCAB_SIZE} (rows are stored as uint16)"),
            (self.min_frequency >= 1, f"data.tokenizer.min_frequency={self.min_frequency} must be at least 1"),
            (self.train_sample_mb > 0, f"data.tokenizer.train_sample_mb={self.train_sample_mb} must be positive"),
        ])



@dataclass
class DataBaseConfig:
    """The keys every source shares; DataConfig (cramming.data.sources) adds each kind's own (`data.files`,
    `data.hub_path`, `data.sources`, ...)."""

    name: str = MISSING
    source: str = MISSING  # embedded | local | hub | mixture
    text_column: str = "text"  # of records (.jsonl, .parquet, the hub)
    # text files: one document per line, per blank-line-separated paragraph, or per file
    sample_by: str = "paragraph"
    max_documents: Optional[int] = None  # stop after this many documents read (large hub corpora)
    # stop once this many tokens are packed: kept documents' tokens, each followed by its [SEP], in reading order;
    # the stream is cut exactly there (the last document may be cut), so rows = max_tokens // seq_length
    max_tokens: Optional[int] = None
    max_doc_chars: int = 1_000_000  # longer documents are cut into pieces, packed back to back
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    seq_length: int = 128
    # shuffle | corpus | frequency_curriculum | reverse_frequency_curriculum | length_curriculum
    # | reverse_length_curriculum (cramming.data.ordering)
    ordering: str = "shuffle"
    seed: int = 0
    # The last rows of the stored order, never trained on: the validation curve's slice (at most a quarter
    # of the rows; 0: no validation). Part of the cache key, so every run on this dataset sees the same.
    validation_rows: int = 256
    # Execution only (not part of the cache key): batch size of text handed to the tokenizer.
    batch_mb: float = 2.0

    def check(self) -> None:
        """Every value but the source's settings in its domain, before any text is read: every problem.
        cramming.data.sources.check_data_config checks the source's settings, then calls this."""
        raise_problems(problems_of(self._check_values, self.tokenizer.check, self.filter.check))

    def _check_values(self) -> None:
        require([
            folder_name("data.name", self.name, "<cache_dir>/data/<data.name>-<key>"),
            (self.ordering in ORDERINGS,
             f"data.ordering={self.ordering!r} is unknown; choose one of {', '.join(ORDERINGS)}"),
            (self.seq_length >= 2, f"data.seq_length={self.seq_length} must be at least 2"),
            (self.batch_mb > 0, f"data.batch_mb={self.batch_mb} must be positive"),
            (self.max_doc_chars >= 1, f"data.max_doc_chars={self.max_doc_chars} must be at least 1"),
            (self.validation_rows >= 0,
             f"data.validation_rows={self.validation_rows} must not be negative (0: no validation)"),
            (self.max_documents is None or self.max_documents >= 1,
             f"data.max_documents={self.max_documents} must be null or at least 1"),
            (self.max_tokens is None or self.max_tokens >= self.seq_length,
             f"data.max_tokens={self.max_tokens} must be null or at least data.seq_length={self.seq_length} (one row)"),
        ])


