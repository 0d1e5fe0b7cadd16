"""A data config checked before any text is read: every value in its domain, one line naming the first
that is not (scripts/prepare_data.py and pretrain.py call it first)."""

from cramming.data.config import DataConfig
from cramming.data.filters import TRASH_SCALINGS
from cramming.data.mixture import check_mixture_config
from cramming.data.ordering import ORDERINGS
from cramming.data.sources import SAMPLE_BY, SOURCES
from cramming.data.tokenizer import MAX_VOCAB_SIZE, SPECIAL_TOKENS, TOKENIZER_KINDS
from cramming.errors import CrammingError


def check_data_config(cfg: DataConfig) -> None:
    """Every value in its domain, before any text is read: one line naming the first that is not."""
    tokenizer, filters = cfg.tokenizer, cfg.filter
    rules = [
        (cfg.source in SOURCES, f"data.source={cfg.source!r} is unknown; choose one of {', '.join(SOURCES)}"),
        (cfg.source != "local" or cfg.files not in (None, "???", "", []),
         "data=local needs data.files=<a file, a glob, or a list of them>"),
        (cfg.sample_by in SAMPLE_BY, f"data.sample_by={cfg.sample_by!r} is unknown; choose one of {', '.join(SAMPLE_BY)}"),
        (cfg.ordering in ORDERINGS, f"data.ordering={cfg.ordering!r} is unknown; choose one of {', '.join(ORDERINGS)}"),
        (tokenizer.kind in TOKENIZER_KINDS,
         f"data.tokenizer.kind={tokenizer.kind!r} is unknown; choose one of {', '.join(TOKENIZER_KINDS)}"),
        (tokenizer.kind != "pretrained" or bool(tokenizer.name),
         "data.tokenizer.kind=pretrained needs data.tokenizer.name=<a hub id such as bert-base-uncased, or a folder>"),
        (tokenizer.kind == "pretrained" or tokenizer.name is None,
         f"data.tokenizer.name={tokenizer.name} is read only with data.tokenizer.kind=pretrained"),
        (len(SPECIAL_TOKENS) < tokenizer.vocab_size <= MAX_VOCAB_SIZE,
         f"data.tokenizer.vocab_size={tokenizer.vocab_size} must be between {len(SPECIAL_TOKENS) + 1} and "
         f"{MAX_VOCAB_SIZE} (rows are stored as uint16)"),
        (tokenizer.min_frequency >= 1, f"data.tokenizer.min_frequency={tokenizer.min_frequency} must be at least 1"),
        (tokenizer.train_sample_mb > 0, f"data.tokenizer.train_sample_mb={tokenizer.train_sample_mb} must be positive"),
        (cfg.seq_length >= 2, f"data.seq_length={cfg.seq_length} must be at least 2"),
        (cfg.batch_mb > 0, f"data.batch_mb={cfg.batch_mb} must be positive"),
        (cfg.max_doc_chars >= 1, f"data.max_doc_chars={cfg.max_doc_chars} must be at least 1"),
        (cfg.validation_rows >= 0, f"data.validation_rows={cfg.validation_rows} must not be negative (0: no validation)"),
        (cfg.max_documents is None or cfg.max_documents >= 1,
         f"data.max_documents={cfg.max_documents} must be null or at least 1"),
        (cfg.max_tokens is None or cfg.max_tokens >= cfg.seq_length,
         f"data.max_tokens={cfg.max_tokens} must be null or at least data.seq_length={cfg.seq_length} (one row)"),
        (cfg.hub_revision is None or cfg.source == "hub",
         f"data.hub_revision={cfg.hub_revision} is read only with data.source=hub (here data.source={cfg.source})"),
        (cfg.hub_revision is None or bool(cfg.hub_revision.strip()),
         "data.hub_revision is empty: give a branch, tag or commit of the hub dataset, or null for its default branch"),
        (filters.min_chars >= 0, f"data.filter.min_chars={filters.min_chars} must not be negative"),
        (filters.trash_cutoff is None or filters.trash_cutoff > 0,
         f"data.filter.trash_cutoff={filters.trash_cutoff} must be null or positive"),
        (filters.trash_cutoff_scaling in TRASH_SCALINGS,
         f"data.filter.trash_cutoff_scaling={filters.trash_cutoff_scaling!r} is unknown; choose one of "
         f"{', '.join(TRASH_SCALINGS)}"),
        (filters.trash_cutoff_scaling != "median" or filters.trash_cutoff is not None,
         "data.filter.trash_cutoff_scaling=median needs data.filter.trash_cutoff=<a multiple of the median, e.g. 1.3>"),
        (filters.trash_cutoff_scaling != "median" or filters.trash_cutoff is None or filters.trash_cutoff >= 1,
         f"data.filter.trash_cutoff={filters.trash_cutoff} with trash_cutoff_scaling=median is a multiple of the "
         "corpus's median tokens per character and must be at least 1 (e.g. 1.3); below 1 it drops most documents"),
        (0 <= filters.max_bad_char_fraction <= 1,
         f"data.filter.max_bad_char_fraction={filters.max_bad_char_fraction} must be in [0, 1]"),
        (filters.near_dedup_threshold is None or 0 < filters.near_dedup_threshold <= 0.98,  # LSH needs 2+ bands
         f"data.filter.near_dedup_threshold={filters.near_dedup_threshold} must be in (0, 0.98] (null: off)"),
    ]
    for ok, problem in rules:
        if not ok:
            raise CrammingError(problem)
    check_mixture_config(cfg)
