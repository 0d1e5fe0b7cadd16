import numpy as np

from cramming.data.config import FilterConfig
from cramming.data.filters import MAX_LINE_CHARS, DocumentFilter, split_long_line, trash_mask

TEXT = ["a perfectly ordinary document with enough characters to pass"]


def test_each_filter_counts_its_drops():
    keep = DocumentFilter(FilterConfig(min_chars=20), max_doc_chars=10_000)
    assert keep(TEXT) == [TEXT]
    assert keep(TEXT) == []  # exact repeat
    assert keep(["short"]) == []
    assert keep(["binary\x00\x00\x00 \ufffd\ufffd data that is long enough"]) == []
    assert keep(["     " * 10]) == []  # whitespace only
    assert dict(keep.counts) == {
        "documents_read": 5,
        "dropped_duplicate": 1,
        "dropped_too_short": 2,
        "dropped_bad_bytes": 1,
    }


def test_deduplication_can_be_switched_off():
    keep = DocumentFilter(FilterConfig(deduplicate=False), max_doc_chars=10_000)
    assert keep(TEXT) == keep(TEXT) == [TEXT]


def test_a_few_bad_bytes_in_a_long_document_are_tolerated():
    keep = DocumentFilter(FilterConfig(max_bad_char_fraction=0.01), max_doc_chars=10_000)
    assert keep(["word " * 100 + "\ufffd"]) != []


def test_long_documents_are_cut_and_long_lines_split():
    keep = DocumentFilter(FilterConfig(), max_doc_chars=100)
    parts = keep(["x" * 60, "y" * 60, "z" * 30])
    assert parts == [["x" * 60], ["y" * 60, "z" * 30]] and keep.counts["cut_for_length"] == 1
    line = "word " * (MAX_LINE_CHARS // 2)
    pieces = split_long_line(line)
    assert "".join(pieces) == line and max(map(len, pieces)) <= MAX_LINE_CHARS
    assert split_long_line("q" * 20_000, limit=8192) == ["q" * 8192, "q" * 8192, "q" * 3616]


def test_trash_mask():
    tokens, chars = np.array([10, 40, 5]), np.array([100, 100, 0])
    assert trash_mask(tokens, chars, 0.3).tolist() == [True, False, False]
    assert trash_mask(tokens, chars, None).tolist() == [True, True, True]
