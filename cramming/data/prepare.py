"""The preparation pipeline: read → filter → train tokenizer → tokenize → pack → order → store.

The tokenizer is trained on a bounded sample, then one streaming pass encodes everything. Three
things overlap: a reader thread (datasets' streaming builders + filters), two encodings on the
tokenizer's own thread pool (Rust, all cores, GIL released), and the main thread turning finished
encodings into rows. Memory stays bounded by a few batches of `data.batch_mb` whatever the corpus size.
"""

import collections
import functools
import json
import logging
import queue
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from tqdm import tqdm

from cramming.data import store
from cramming.data.config import DataConfig
from cramming.data.filters import DocumentFilter
from cramming.data.ordering import ORDERINGS, row_order
from cramming.data.packing import RowWriter, TextBatch, documents_to_stream
from cramming.data.sources import SAMPLE_BY, SOURCES, Document, Source
from cramming.data.tokenizer import MAX_VOCAB_SIZE, SPECIAL_TOKENS, TOKENIZER_KINDS, train_tokenizer
from cramming.errors import CrammingError

log = logging.getLogger(__name__)
ENCODES_IN_FLIGHT = 2


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
        (filters.min_chars >= 0, f"data.filter.min_chars={filters.min_chars} must not be negative"),
        (filters.trash_cutoff is None or filters.trash_cutoff > 0,
         f"data.filter.trash_cutoff={filters.trash_cutoff} must be null or positive"),
        (0 <= filters.max_bad_char_fraction <= 1,
         f"data.filter.max_bad_char_fraction={filters.max_bad_char_fraction} must be in [0, 1]"),
        (filters.near_dedup_threshold is None or 0 < filters.near_dedup_threshold <= 0.98,  # LSH needs 2+ bands
         f"data.filter.near_dedup_threshold={filters.near_dedup_threshold} must be in (0, 0.98] (null: off)"),
    ]
    for ok, problem in rules:
        if not ok:
            raise CrammingError(problem)


VERIFIED: set[Path] = set()  # cached datasets whose hashes this process has checked


def prepare_dataset(cfg: DataConfig, cache_dir: str, verify: bool = True) -> tuple[store.PreparedDataset, bool]:
    """Return the prepared dataset for `cfg`, building it unless the cache has it (second value: reused).

    A cached dataset is checked before it is trusted: sizes always, hashes the first time this process
    reuses it (verify=False skips them, for a process whose peer has just checked). A damaged one is
    rebuilt, and the log says so in one line.
    """
    check_data_config(cfg)
    source = Source.from_config(cfg)
    final_dir = store.dataset_dir(cache_dir, cfg, store.cache_key(cfg, source.fingerprint()))
    if (final_dir / store.META_FILE).exists():
        try:
            dataset = store.PreparedDataset.open(final_dir, verify_hashes=verify and final_dir not in VERIFIED)
            VERIFIED.add(final_dir)
            return dataset, True
        except CrammingError as problem:
            log.warning("%s; rebuilding it", problem)
            shutil.rmtree(final_dir)
    elif final_dir.exists():
        shutil.rmtree(final_dir)  # no meta.json: never finished
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    store.remove_stale_builds(final_dir)
    tmp = store.temporary_dir(final_dir)
    try:
        meta = _build(cfg, source, tmp)
        (tmp / store.META_FILE).write_text(json.dumps(meta, indent=2))
        store.publish(tmp, final_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    VERIFIED.add(final_dir)  # just written, hashes and all
    return store.PreparedDataset.open(final_dir), False


def _capped(documents: Iterable[Document], max_documents: int | None) -> Iterator[Document]:
    for count, document in enumerate(documents):
        if max_documents is not None and count >= max_documents:
            return
        yield document


def _tokenizer_sample(cfg: DataConfig, source: Source, sample_filter: DocumentFilter) -> Iterator[str]:
    """Lines of the first `train_sample_mb` of text that passes the tokenizer-free filters."""
    budget = cfg.tokenizer.train_sample_mb * 1e6
    for document in _capped(source.documents(), cfg.max_documents):
        for part in sample_filter(document):
            yield from part
            budget -= sum(map(len, part))
        if budget <= 0:
            return


def _batches(documents: Iterable[Document], doc_filter: DocumentFilter, batch_chars: float, progress):
    batch = TextBatch()
    chars = 0
    for document in documents:
        progress.update(sum(map(len, document)) + len(document))  # characters, ≈ bytes of English text
        for part in doc_filter(document):
            batch.add(part)
            chars += batch.chars_per_doc[-1]
        if chars >= batch_chars:
            yield batch
            batch, chars = TextBatch(), 0
    if batch.lines_per_doc:
        yield batch


def _prefetch(iterator: Iterator, depth: int = 2) -> Iterator:
    """Run `iterator` in a background thread, `depth` items ahead; its exceptions surface here."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterator:
                while not stop.is_set():
                    try:
                        items.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(done)
        except BaseException as error:  # handed to the consumer
            items.put(error)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while (item := items.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _finished(item):
    batch, encodings = item
    return batch, encodings.result()


def _build(cfg: DataConfig, source: Source, out: Path) -> dict:
    started = time.perf_counter()
    log.info("training a %s tokenizer (vocabulary %d) on up to %.0f MB of text",
             cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.train_sample_mb)
    sample_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    sample = list(_tokenizer_sample(cfg, source, sample_filter))
    if not sample:  # say so now, not as a vocabulary the empty sample cannot support
        raise CrammingError(f"no documents left after filtering ({_dropped_summary(sample_filter.counts)})")
    del sample_filter  # and its near-duplicate index
    tokenizer = train_tokenizer(sample, cfg.tokenizer, cfg.normalize)
    tokenizer.save(str(out / store.TOKENIZER_FILE))
    tokenizer_seconds = time.perf_counter() - started

    doc_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    writer = RowWriter(out / store.ROWS_FILE, cfg.seq_length)
    token_counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    counts: Counter[str] = Counter()

    def pack(batch: TextBatch, encodings) -> None:
        stream, kept, trashed = documents_to_stream(batch, encodings, cfg.filter.trash_cutoff)
        counts["documents_kept"] += kept
        counts["dropped_trash"] += trashed
        counts["tokens"] += len(stream)
        token_counts[:] += np.bincount(stream, minlength=len(token_counts))
        writer.write(stream)

    progress = tqdm(total=source.total_bytes(), unit="B", unit_scale=True, desc="tokenizing", mininterval=1.0)
    documents = _capped(source.documents(), cfg.max_documents)
    encode = functools.partial(tokenizer.encode_batch_fast, add_special_tokens=False)
    in_flight: collections.deque = collections.deque()
    # Two encodings in flight keep the tokenizer's thread pool busy across batch boundaries while this
    # thread packs finished batches, in order.
    with ThreadPoolExecutor(max_workers=ENCODES_IN_FLIGHT) as encoders:
        for batch in _prefetch(_batches(documents, doc_filter, cfg.batch_mb * 1e6, progress)):
            in_flight.append((batch, encoders.submit(encode, batch.lines)))
            if len(in_flight) > ENCODES_IN_FLIGHT:
                pack(*_finished(in_flight.popleft()))
        while in_flight:
            pack(*_finished(in_flight.popleft()))
    progress.close()
    tail_tokens = writer.close()
    counts.update(doc_filter.counts)

    if counts["documents_kept"] == 0:
        raise CrammingError(f"no documents left after filtering ({_dropped_summary(counts)})")
    if writer.rows == 0:
        raise CrammingError(
            f"the corpus gives {counts['tokens']} tokens, fewer than one row of data.seq_length={cfg.seq_length}"
        )
    order = row_order(cfg.ordering, out / store.ROWS_FILE, writer.rows, cfg.seq_length, token_counts, cfg.seed)
    np.save(out / store.ORDER_FILE, order)
    np.save(out / store.COUNTS_FILE, token_counts)
    seconds = time.perf_counter() - started
    whole_source = source.total_bytes() if cfg.max_documents is None else None
    input_bytes = whole_source or progress.n  # the progress count misses blank lines between documents
    return {
        "format_version": store.FORMAT_VERSION,
        "name": cfg.name,
        "config": OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True),
        "source": source.fingerprint(),
        "seq_length": cfg.seq_length,
        "vocab_size": tokenizer.get_vocab_size(),
        "num_rows": writer.rows,
        "tokens_packed": writer.rows * cfg.seq_length,
        "tail_tokens_dropped": tail_tokens,
        "documents": {
            "read": counts["documents_read"],
            "kept": counts["documents_kept"],
            "cut_for_length": counts["cut_for_length"],
            "pieces_from_cuts": counts["pieces_from_cuts"],
            "dropped": {reason: counts[f"dropped_{reason}"] for reason in DROP_REASONS},
        },
        "input_megabytes": round(input_bytes / 1e6, 3),
        "seconds": {"total": round(seconds, 2), "tokenizer_training": round(tokenizer_seconds, 2)},
        "megabytes_per_second": round(input_bytes / 1e6 / seconds, 3),
        "sha256": {
            name: store.file_sha256(out / name) for name in (store.ROWS_FILE, store.ORDER_FILE, store.TOKENIZER_FILE)
        },
        "bytes": {name: (out / name).stat().st_size for name in (store.ROWS_FILE, store.ORDER_FILE, store.TOKENIZER_FILE)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


DROP_REASONS = ("too_short", "bad_bytes", "duplicate", "near_duplicate", "trash")


def _dropped_summary(counts: Counter) -> str:
    dropped = ", ".join(f"{reason} {counts[f'dropped_{reason}']}" for reason in DROP_REASONS)
    return f"read {counts['documents_read']} documents; dropped: {dropped}"


def format_summary(dataset: store.PreparedDataset, reused: bool, seconds: float) -> str:
    meta = dataset.meta
    docs = meta["documents"]
    dropped = ", ".join(f"{reason} {count}" for reason, count in docs["dropped"].items())
    lines = [
        f"dataset   {dataset.path}",
        f"status    {'reused from cache (prepared ' + meta['created'] + ')' if reused else 'prepared now'}"
        + f" in {seconds:.1f} s",
        f"text      {meta['input_megabytes']:.1f} MB read; documents: read {docs['read']}"
        + (f" (+{docs['pieces_from_cuts']} pieces from cutting {docs['cut_for_length']} long ones)"
           if docs["cut_for_length"] else "")
        + f", kept {docs['kept']}, dropped {sum(docs['dropped'].values())} ({dropped})",
        f"tokens    {meta['tokens_packed']:,} in {meta['num_rows']:,} rows of {meta['seq_length']} "
        f"({meta['tail_tokens_dropped']} tail tokens left out); vocabulary {meta['vocab_size']}",
        f"order     {meta['config']['ordering']} (seed {meta['config']['seed']})",
        f"speed     {meta['megabytes_per_second']:.2f} MB/s end to end when prepared "
        f"({meta['seconds']['total']:.1f} s, of which tokenizer training {meta['seconds']['tokenizer_training']:.1f} s)",
    ]
    return "\n".join(lines)
