import numpy as np
import pytest

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.ordering import row_order
from cramming.data.packing import RowWriter, TextBatch, documents_to_stream
from cramming.data.sources import embedded_documents
from cramming.data.tokenizer import train_tokenizer
from cramming.data.vocab import SEP_ID
from cramming.errors import CrammingError


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["\n".join(document) for document in embedded_documents()]
    return train_tokenizer(texts, TokenizerConfig(vocab_size=2000), NormalizeConfig())


def encode(tokenizer, documents, cutoff=None):
    batch = TextBatch()
    for document in documents:
        batch.add(document)
    return documents_to_stream(batch, tokenizer.encode_batch_fast(batch.lines, add_special_tokens=False), cutoff)


def test_documents_are_joined_line_by_line_and_separated_by_sep(tokenizer):
    documents = [["the for statement", "is used"], ["an expression"]]
    stream, kept, trashed = encode(tokenizer, documents)
    first = tokenizer.encode("the for statement is used", add_special_tokens=False).ids
    second = tokenizer.encode("an expression", add_special_tokens=False).ids
    assert stream.dtype == np.uint16 and (kept, trashed) == (2, 0)
    assert stream.tolist() == first + [SEP_ID] + second + [SEP_ID]


def test_trash_filter_uses_the_corpus_tokenizer(tokenizer):
    gibberish = ["qzx vvk jjq zzpx kqv xqz" * 4]
    stream, kept, trashed = encode(tokenizer, [["the value of the expression is returned"], gibberish], cutoff=0.3)
    assert (kept, trashed) == (1, 1)
    assert stream.tolist().count(SEP_ID) == 1


def test_row_writer_cuts_rows_and_keeps_the_remainder(tmp_path):
    writer = RowWriter(tmp_path / "rows.bin", seq_length=4)
    writer.write(np.arange(6, dtype=np.uint16))
    writer.write(np.arange(6, 9, dtype=np.uint16))
    assert writer.close() == 1 and writer.rows == 2
    rows = np.fromfile(tmp_path / "rows.bin", dtype=np.uint16).reshape(-1, 4)
    assert rows.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_orderings(tmp_path):
    rows = np.array([[9, 9, 9], [1, 1, 1], [5, 5, 5], [1, 1, 9]], dtype=np.uint16)
    rows.tofile(tmp_path / "rows.bin")
    counts = np.zeros(10, dtype=np.int64)
    counts[1], counts[5], counts[9] = 1000, 100, 1
    args = (tmp_path / "rows.bin", 4, 3, counts)
    assert row_order("corpus", *args, seed=0).tolist() == [0, 1, 2, 3]
    shuffled = row_order("shuffle", *args, seed=3)
    assert sorted(shuffled.tolist()) == [0, 1, 2, 3] and shuffled.dtype == np.uint32
    assert row_order("shuffle", *args, seed=3).tolist() == shuffled.tolist()
    assert row_order("frequency_curriculum", *args, seed=0).tolist() == [1, 3, 2, 0]  # common tokens first
    with pytest.raises(CrammingError, match="ordering='random' is unknown"):
        row_order("random", *args, seed=0)


def test_a_token_limit_cuts_the_stream_and_counts_only_the_documents_it_reaches(tokenizer):
    """data.max_tokens' room: the document the cut falls in counts as kept with the tokens before the cut; the
    trash and the documents after the cut are not counted at all."""
    gibberish = ["qzx vvk jjq zzpx kqv xqz" * 4]
    documents = [["the value of the expression is returned"], gibberish, ["an expression"], gibberish, ["the end"]]
    batch = TextBatch()
    for origin, document in enumerate(documents):
        batch.add(document, origin % 2)
    encodings = tokenizer.encode_batch_fast(batch.lines, add_special_tokens=False)
    whole, _, _ = documents_to_stream(batch, encodings, 0.3)
    first = len(tokenizer.encode(documents[0][0], add_special_tokens=False).ids) + 1  # with its [SEP]
    limit = first + 2  # two tokens into "an expression"
    per_source = np.zeros((2, 2), dtype=np.int64)
    stream, kept, trashed = documents_to_stream(batch, encodings, 0.3, per_source, limit)
    assert stream.tolist() == whole.tolist()[:limit]
    assert (kept, trashed) == (2, 1)  # the first two documents and the gibberish between them
    assert per_source.tolist() == [[2, limit], [0, 0]] and per_source[:, 1].sum() == len(stream)
