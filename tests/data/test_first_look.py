"""The first look's file checks on real files: each format's damage named, and sound files of every format passed,
a .json file holding one document (an array, pretty-printed) among them."""

import gzip
import json

import pyarrow
import pyarrow.parquet

from cramming.data.first_look import file_problems


def test_sound_files_of_every_format_pass(tmp_path):
    records = [{"text": f"Document {number}."} for number in range(50)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (tmp_path / "b.json").write_text(json.dumps(records, indent=2))  # one document: its last line is "]"
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"one\n") + gzip.compress(b"two\n"))  # two members
    pyarrow.parquet.write_table(pyarrow.table({"text": [r["text"] for r in records]}), tmp_path / "d.parquet")
    assert [file_problems(str(path)) for path in sorted(tmp_path.iterdir())] == [[], [], [], []]


def test_damaged_files_are_named(tmp_path):
    lines = "".join(json.dumps({"text": f"Document {number}."}) + "\n" for number in range(50))
    (tmp_path / "cut.jsonl").write_text(lines[:-9])
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(lines.encode() * 50)[:300])
    (tmp_path / "plain.txt.gz").write_text(lines)
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not a table")
    said = {path.name: file_problems(str(path)) for path in tmp_path.iterdir()}
    assert said["cut.jsonl"][0].startswith(f"data.files: {tmp_path}/cut.jsonl ends in a cut record")
    assert said["cut.txt.gz"] == [f"data.files: {tmp_path}/cut.txt.gz is truncated: its gzip stream ends before its "
                                  "end marker (an interrupted download or copy?)"]
    assert said["plain.txt.gz"] == [f"data.files: {tmp_path}/plain.txt.gz is not gzip-compressed (it does not "
                                    "start as a gzip file)"]
    assert said["junk.parquet"][0].startswith(f"data.files: {tmp_path}/junk.parquet is not a readable parquet file "
                                              "(ArrowInvalid: ")
