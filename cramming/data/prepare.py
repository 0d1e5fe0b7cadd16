"""The preparation pipeline: read → filter → train tokenizer → tokenize → pack → order → store.

The tokenizer is trained on a bounded sample, then one streaming pass encodes everything. Three
things overlap: a reader thread (datasets' streaming builders + filters), two encodings on the
tokenizer's own thread pool (Rust, all cores, GIL released), and the main thread turning finished
encodings into rows. Memory stays bounded by a few batches of `data.batch_mb` whatever the corpus size. One
concept, the pipeline, kept in one file so that its stages and the threads that overlap them read together.
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
from tokenizers import Tokenizer

from cramming.data import store
from cramming.data.config import DataBaseConfig
from cramming.data.filters import DocumentFilter, median_tokens_per_char, trash_cutoff
from cramming.data.first_look import FirstLook, data_problems
from cramming.data.mixture import Mixture
from cramming.data.ordering import row_order, sentence_end_ids
from cramming.data.packing import RowWriter, TextBatch, documents_to_stream
from cramming.data.pretrained_tokenizer import pretrained_tokenizer, tokenizer_sha256
from cramming.data.progress_bar import PreparationProgress
from cramming.data.source_base import Document, Source
from cramming.data.sources import check_data_config, source_from_config
from cramming.data.tokenizer import train_tokenizer
from cramming.data.vocab import SEP_ID
from cramming.errors import CrammingError

log = logging.getLogger(__name__)
ENCODES_IN_FLIGHT = 2


VERIFIED: set[Path] = set()  # cached datasets whose hashes this process has checked
LOOKED: dict[Path, FirstLook] = {}  # datasets to prepare whose files and first records this process has judged


def look_once(cfg: DataBaseConfig, source: Source, final_dir: Path) -> FirstLook:
    """data_problems for the dataset that will be built in `final_dir`, once a process (the start's check and
    the preparation after it share it)."""
    if final_dir not in LOOKED:
        LOOKED[final_dir] = data_problems(cfg, source)
    return LOOKED[final_dir]


def dataset_folder(cfg: DataBaseConfig, cache_dir: str, source: Source) -> Path | None:
    """Where the cache keeps, or will keep, the dataset of `cfg`; None where only the network would tell (the
    fingerprint of a hub corpus or of a pretrained tokenizer reads it)."""
    if source.name == "hub" or cfg.tokenizer.kind == "pretrained":
        return None
    return store.dataset_dir(cache_dir, cfg, store.cache_key(cfg, source.fingerprint()))


def first_look_before_preparing(cfg: DataBaseConfig, cache_dir: str) -> FirstLook | None:
    """look_once where the run will prepare its data; None where the cache holds it, or where only reading the
    network would tell (preflight=true reads a hub corpus's first records)."""
    source = source_from_config(cfg)
    folder = dataset_folder(cfg, cache_dir, source)
    if folder is None or store.cached_dataset(folder) is not None:
        return None
    return look_once(cfg, source, folder)


def cached_tokenizer(cfg: DataBaseConfig, cache_dir: str) -> Path | None:
    """The tokenizer.json of the prepared dataset of `cfg` where the cache holds it whole, its hash verified
    (None otherwise: a damaged one is rebuilt by the preparation)."""
    folder = dataset_folder(cfg, cache_dir, source_from_config(cfg))
    dataset = store.cached_dataset(folder) if folder is not None else None
    return dataset.tokenizer_path if dataset is not None and dataset.hash_matches(store.TOKENIZER_FILE) else None


def prepare_dataset(cfg: DataBaseConfig, cache_dir: str, verify: bool = True) -> tuple[store.PreparedDataset, bool]:
    """Return the prepared dataset for `cfg`, building it unless the cache has it (second value: reused).

    A cached dataset is checked before it is trusted: sizes always, hashes the first time this process
    reuses it (verify=False skips them, for a process whose peer has just checked). A damaged one is
    rebuilt, and the log says so in one line.
    """
    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_object(cfg)
    check_data_config(cfg)
    source = source_from_config(cfg)
    fingerprint, pretrained = source.fingerprint(), None
    if cfg.tokenizer.kind == "pretrained":  # its files are part of what the dataset is made of
        pretrained = pretrained_tokenizer(cfg.tokenizer.name)
        fingerprint = {**fingerprint, "tokenizer_sha256": tokenizer_sha256(pretrained)}
    final_dir = store.dataset_dir(cache_dir, cfg, store.cache_key(cfg, fingerprint))
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
    look_once(cfg, source, final_dir)  # a corpus that would fail is refused before hours of reading
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    store.remove_stale_builds(final_dir)
    tmp = store.temporary_dir(final_dir)
    try:
        meta = _build(cfg, source, tmp, pretrained)
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


def _tokenizer_sample(cfg: DataBaseConfig, source: Source, sample_filter: DocumentFilter) -> TextBatch:
    """The first `train_sample_mb` of text that passes the tokenizer-free filters."""
    sample = TextBatch()
    budget = cfg.tokenizer.train_sample_mb * 1e6
    for document in _capped(source.documents(), cfg.max_documents):
        for part in sample_filter(document):
            sample.add(part)
            budget -= sample.chars_per_doc[-1]
        if budget <= 0:
            break
    return sample


def _batches(documents: Iterable[tuple[int, Document]], doc_filter: DocumentFilter, batch_chars: float,
             progress: PreparationProgress, track_reading: bool):
    """Filtered documents in batches of about `batch_chars`. track_reading (under a token cap): each part also
    carries what had been read up to its document, so the counts can stop where the cap cuts the stream rather
    than where the reader, ahead of the packing, happened to be."""
    batch = TextBatch()
    chars = 0
    for origin, document in documents:
        progress.read(origin, document)
        read_so_far = None
        for part in doc_filter(document):
            batch.add(part, origin)
            chars += batch.chars_per_doc[-1]
            if track_reading:
                read_so_far = read_so_far or (Counter(doc_filter.counts), list(progress.read_per_source),
                                              progress.bytes)
                batch.read_so_far.append(read_so_far)
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


def _build(cfg: DataBaseConfig, source: Source, out: Path, pretrained: Tokenizer | None) -> dict:
    """pretrained: the tokenizer of data.tokenizer.kind=pretrained; None trains one on the corpus."""
    started = time.perf_counter()
    if pretrained is None:
        log.info("training a %s tokenizer (vocabulary %d) on up to %.0f MB of text",
                 cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.train_sample_mb)
    else:
        log.info("tokenizer %s: vocabulary %d and its own normalization (data.tokenizer.vocab_size, min_frequency, "
                 "train_sample_mb and data.normalize do not apply)", cfg.tokenizer.name, pretrained.get_vocab_size())
    sample_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    sample = _tokenizer_sample(cfg, source, sample_filter)
    if not sample.lines:  # say so now, not as a vocabulary the empty sample cannot support
        raise CrammingError(f"no documents left after filtering ({_dropped_summary(sample_filter.counts)})")
    del sample_filter  # and its near-duplicate index
    tokenizer = pretrained or train_tokenizer(sample.lines, cfg.tokenizer, cfg.normalize)
    tokenizer.save(str(out / store.TOKENIZER_FILE))
    median_ratio = _median_ratio(tokenizer, sample) if cfg.filter.trash_cutoff_scaling == "median" else None
    cutoff = trash_cutoff(cfg.filter, median_ratio)
    cutoff = cutoff if median_ratio is None else round(cutoff, 6)
    if median_ratio is not None:
        log.info("median tokens per character %.4f: trash cutoff %.4f", median_ratio, cutoff)
    del sample
    tokenizer_seconds = time.perf_counter() - started

    doc_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    writer = RowWriter(out / store.ROWS_FILE, cfg.seq_length)
    token_counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    counts: Counter[str] = Counter()
    mixture = source if isinstance(source, Mixture) else None
    progress = PreparationProgress(cfg, source.total_bytes(), len(mixture.names) if mixture else 1)
    per_source = np.zeros((len(progress.read_per_source), 2), dtype=np.int64)  # kept documents, tokens
    read_to_the_cut = None  # under data.max_tokens: what had been read up to the document the cap cut

    def pack(batch: TextBatch, encodings) -> None:
        nonlocal read_to_the_cut
        room = None if cfg.max_tokens is None else cfg.max_tokens - counts["tokens"]
        stream, kept, trashed = documents_to_stream(batch, encodings, cutoff, per_source, room)
        counts["documents_kept"] += kept
        counts["dropped_trash"] += trashed
        counts["tokens"] += len(stream)
        token_counts[:] += np.bincount(stream, minlength=len(token_counts))
        writer.write(stream)
        progress.packed(len(stream))
        if full():  # the documents the stream reached: kept and trashed ones, in order
            read_to_the_cut = batch.read_so_far[kept + trashed - 1]

    def full() -> bool:
        return cfg.max_tokens is not None and counts["tokens"] >= cfg.max_tokens

    documents = _capped(source.tagged_documents(), cfg.max_documents)
    encode = functools.partial(tokenizer.encode_batch_fast, add_special_tokens=False)
    in_flight: collections.deque = collections.deque()
    # Two encodings in flight keep the tokenizer's thread pool busy across batch boundaries while this
    # thread packs finished batches, in order.
    batches = _prefetch(_batches(documents, doc_filter, cfg.batch_mb * 1e6, progress, cfg.max_tokens is not None))
    with ThreadPoolExecutor(max_workers=ENCODES_IN_FLIGHT) as encoders:
        for batch in batches:
            in_flight.append((batch, encoders.submit(encode, batch.lines)))
            if len(in_flight) > ENCODES_IN_FLIGHT:
                pack(*_finished(in_flight.popleft()))
            if full():
                break
        batches.close()  # stops the reader where the token cap was reached
        while in_flight and not full():
            pack(*_finished(in_flight.popleft()))
        for _, encoding in in_flight:
            encoding.cancel()
    progress.close()
    tail_tokens = writer.close()
    filter_counts, read_per_source, bytes_read = (read_to_the_cut if full() else
                                                  (doc_filter.counts, progress.read_per_source, progress.bytes))
    counts.update(filter_counts)

    if counts["documents_kept"] == 0:
        raise CrammingError(f"no documents left after filtering ({_dropped_summary(counts)})")
    if writer.rows == 0:
        raise CrammingError(
            f"the corpus gives {counts['tokens']} tokens, fewer than one row of data.seq_length={cfg.seq_length}"
        )
    order = row_order(cfg.ordering, out / store.ROWS_FILE, writer.rows, cfg.seq_length, token_counts, cfg.seed,
                      sentence_end_ids(tokenizer.get_vocab(), SEP_ID))
    np.save(out / store.ORDER_FILE, order)
    np.save(out / store.COUNTS_FILE, token_counts)
    seconds = time.perf_counter() - started
    # the characters read miss blank lines between documents; a mixture reads only part of some sources
    whole = cfg.max_documents is None and cfg.max_tokens is None and mixture is None
    input_bytes = (source.total_bytes() if whole else None) or bytes_read
    meta = {
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
        "sha256": {name: store.file_sha256(out / name) for name in store.HASHED_FILES},
        "bytes": {name: (out / name).stat().st_size for name in store.HASHED_FILES},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "trash_filter": {"cutoff": cutoff, "scaling": cfg.filter.trash_cutoff_scaling,
                         "median_ratio": None if median_ratio is None else round(median_ratio, 6)},
        **source.provenance(),
    }
    if mixture is not None:
        meta["sources"] = [
            {**described, "documents_read": read, "documents_kept": int(kept), "tokens": int(tokens),
             "token_share": round(int(tokens) / max(counts["tokens"], 1), 4)}
            for described, read, (kept, tokens) in zip(mixture.describe(), read_per_source, per_source)
        ]
    meta["meta_sha256"] = store.meta_sha256(meta)
    return meta


def _median_ratio(tokenizer, sample: TextBatch) -> float:
    """The median tokens per character of the tokenizer's training sample, with the trained tokenizer."""
    encodings = tokenizer.encode_batch_fast(sample.lines, add_special_tokens=False)
    line_tokens = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    doc_tokens = np.add.reduceat(line_tokens, np.cumsum([0] + sample.lines_per_doc[:-1]))
    return median_tokens_per_char(doc_tokens, np.asarray(sample.chars_per_doc))


DROP_REASONS = ("too_short", "bad_bytes", "duplicate", "near_duplicate", "trash", "no_text")


def _dropped_summary(counts: Counter) -> str:
    dropped = ", ".join(f"{reason} {counts[f'dropped_{reason}']}" for reason in DROP_REASONS)
    return f"read {counts['documents_read']} documents; dropped: {dropped}"
