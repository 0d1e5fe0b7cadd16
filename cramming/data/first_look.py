"""The data judged before it is prepared: each input file's format, and what the filters and the vocabulary do to
the source's first records. A corpus that preparation would refuse after hours of reading is refused at minute
zero, naming the setting that does it.

`data_problems` runs where a run or `prepare_data.py` starts, on data the cache does not hold yet. It reads at
most FIRST_LOOK_CHARS of filtered text: what it cannot judge from them (a vocabulary a larger corpus may still
support) it returns as notes, which `preflight=true` lists.
"""

import json
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from cramming.data.config import DataBaseConfig
from cramming.data.filters import DocumentFilter, median_tokens_per_char, trash_cutoff, trash_mask
from cramming.data.packing import TextBatch
from cramming.data.source_base import Source
from cramming.data.tokenizer import SPECIAL_TOKENS, train_tokenizer
from cramming.errors import CrammingError, raise_problems

FIRST_LOOK_CHARS = 2_000_000  # filtered text read to judge the filters and the vocabulary: about a second
GZIP_CHUNK = 1 << 20
TAIL_BYTES = 1 << 16  # the end of a jsonl file read to find its last record
# The blame for a filter that drops every document of the first records, by its count's name.
FILTER_SETTINGS = {
    "too_short": "data.filter.min_chars={min_chars}: every document is shorter",
    "bad_bytes": "data.filter.max_bad_char_fraction={max_bad_char_fraction}: every document has more undecodable "
                 "bytes",
    "duplicate": "data.filter.deduplicate: every document repeats an earlier one",
    "near_duplicate": "data.filter.near_dedup_threshold={near_dedup_threshold}: every document nearly repeats an "
                      "earlier one",
    "no_text": "data.text_column={text_column}: no record has text there",
}


@dataclass
class FirstLook:
    documents_read: int = 0
    whole_source: bool = False  # the source ended within the look
    # the look read the very text preparation trains its tokenizer on (all of it: the source or data.max_documents
    # ended, or data.tokenizer.train_sample_mb is within the look)
    whole_sample: bool = False
    notes: list[str] = field(default_factory=list)  # what could not be judged from the first records


def data_problems(cfg: DataBaseConfig, source: Source) -> FirstLook:
    """Every input file's format (file_problems), then the first records through the filters and a tokenizer
    trained on them as preparation would; raises Problems naming the settings that would keep nothing."""
    raise_problems([problem for path in source.input_files() for problem in file_problems(path)])
    return look_at_first_records(cfg, source)


def file_problems(path: str) -> list[str]:
    """The ways `path` would fail to read to its end: a damaged or truncated gzip stream (read whole: about 50 MB
    of compressed text a second, a small part of what preparing it costs), a jsonl file whose last record is cut
    (a .json file may be one document, an array, with no last record to read alone), a parquet file without its
    footer."""
    if os.path.getsize(path) == 0:
        return []  # empty: no documents, counted as such
    try:
        if path.endswith(".gz"):
            _check_gzip(path)
        if path.endswith(".jsonl"):
            _check_last_json_line(path)
        if path.endswith(".parquet"):
            _check_parquet_footer(path)
    except CrammingError as error:
        return [str(error)]
    return []


def _check_parquet_footer(path: str) -> None:
    import pyarrow.parquet  # noqa: PLC0415 -- only where a parquet file is read

    try:
        pyarrow.parquet.read_metadata(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise CrammingError(f"data.files: {path} is not a readable parquet file ({type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''})") from None


def _check_gzip(path: str) -> None:
    decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            raise CrammingError(f"data.files: {path} is not gzip-compressed (it does not start as a gzip file)")
        handle.seek(0)
        try:
            while chunk := handle.read(GZIP_CHUNK):
                while chunk:
                    decompressor.decompress(chunk, GZIP_CHUNK)
                    chunk = decompressor.unconsumed_tail
                    if decompressor.eof and decompressor.unused_data:  # several members, as `cat a.gz b.gz` makes
                        chunk = decompressor.unused_data + chunk
                        decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
        except zlib.error as error:
            raise CrammingError(f"data.files: {path} is damaged ({error})") from None
    if not decompressor.eof:
        raise CrammingError(f"data.files: {path} is truncated: its gzip stream ends before its end marker (an "
                            "interrupted download or copy?)")


def _check_last_json_line(path: str) -> None:
    with open(path, "rb") as handle:
        handle.seek(max(os.path.getsize(path) - TAIL_BYTES, 0))
        tail = handle.read().rstrip(b"\r\n ")
    last = tail.rpartition(b"\n")[2]
    if len(last) == len(tail) and len(tail) == TAIL_BYTES:
        return  # one record longer than the tail: its end is read with the rest
    try:
        json.loads(last)
    except ValueError:
        raise CrammingError(f"data.files: {path} ends in a cut record (its last line is not JSON: "
                            f"{last[-60:].decode(errors='replace')!r}): a truncated file?") from None


def look_at_first_records(cfg: DataBaseConfig, source: Source) -> FirstLook:
    """The first FIRST_LOOK_CHARS of text that passes the filters, and a tokenizer trained on them."""
    look, sample = FirstLook(), TextBatch()
    document_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    training_sample = cfg.tokenizer.train_sample_mb * 1e6
    budget = min(FIRST_LOOK_CHARS, training_sample)
    for look.documents_read, document in enumerate(source.documents(), 1):
        for part in document_filter(document):
            sample.add(part)
            budget -= sample.chars_per_doc[-1]
        if budget <= 0 or look.documents_read == cfg.max_documents:
            look.whole_sample = budget > 0 or FIRST_LOOK_CHARS >= training_sample
            break
    else:
        look.whole_source = look.whole_sample = True
    if look.documents_read == 0:
        raise CrammingError(f"data: {source.where} holds no documents (no text to train on)")
    if not sample.lines:
        raise CrammingError(_blame_filters(cfg, document_filter.counts, look))
    if cfg.tokenizer.kind == "pretrained":
        look.notes.append("the trash filter with the pretrained tokenizer: judged when the data is prepared")
        return look
    try:  # the tokenizer preparation trains, where the look read all of its text
        tokenizer = train_tokenizer(sample.lines, cfg.tokenizer, cfg.normalize)
    except CrammingError:
        if look.whole_sample:
            raise
        look.notes.append(f"data.tokenizer.vocab_size={cfg.tokenizer.vocab_size} against the corpus, and the trash "
                          f"filter: judged as the data is prepared (the {look.documents_read} documents read first "
                          "are too few to train that vocabulary)")
        return look
    _check_trash(cfg, tokenizer, sample, look)
    return look


def _blame_filters(cfg: DataBaseConfig, counts, look: FirstLook) -> str:
    """The filter that dropped most of the first documents, named by its setting."""
    reason = max(FILTER_SETTINGS, key=lambda name: counts[f"dropped_{name}"])
    settings = {"min_chars": cfg.filter.min_chars, "max_bad_char_fraction": cfg.filter.max_bad_char_fraction,
                "near_dedup_threshold": cfg.filter.near_dedup_threshold, "text_column": cfg.text_column}
    scope = "the whole source" if look.whole_source else f"the first {look.documents_read} documents"
    dropped = ", ".join(f"{name} {counts[f'dropped_{name}']}" for name in FILTER_SETTINGS if counts[f"dropped_{name}"])
    return (f"{FILTER_SETTINGS[reason].format(**settings)} — the filters keep none of {scope} ({dropped}), so "
            "preparation would keep nothing: change that setting or the data")


def _check_trash(cfg: DataBaseConfig, tokenizer, sample: TextBatch, look: FirstLook) -> None:
    """The trash filter with the sample's own tokenizer: keeping none of the sample names the vocabulary when it
    cannot even hold the sample's characters, else the cutoff."""
    encodings = tokenizer.encode_batch_fast(sample.lines, add_special_tokens=False)
    line_tokens = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    doc_tokens = np.add.reduceat(line_tokens, np.cumsum([0] + sample.lines_per_doc[:-1]))
    doc_chars = np.asarray(sample.chars_per_doc)
    median = median_tokens_per_char(doc_tokens, doc_chars)
    cutoff = trash_cutoff(cfg.filter, median)
    if trash_mask(doc_tokens, doc_chars, cutoff).any():
        return
    scope = "the whole source" if look.whole_source else f"the first {len(doc_chars)} documents kept"
    characters = len(set("".join(sample.lines)))
    if cfg.tokenizer.vocab_size - len(SPECIAL_TOKENS) < characters:
        raise CrammingError(
            f"data.tokenizer.vocab_size={cfg.tokenizer.vocab_size} is too small: {len(SPECIAL_TOKENS)} special tokens "
            f"and {characters} distinct characters in the text leave no room, so text takes {median:.2f} tokens a "
            f"character and the trash filter (cutoff {cutoff:.2f}) keeps none of {scope}: raise the vocabulary")
    raise CrammingError(
        f"data.filter.trash_cutoff={cfg.filter.trash_cutoff}: the trash filter keeps none of {scope} (its text takes "
        f"{median:.2f} tokens a character, the cutoff is {cutoff:.2f}): raise the cutoff or set it to null")

