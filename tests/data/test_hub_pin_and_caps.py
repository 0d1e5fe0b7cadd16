"""Hub slices through the command line (scripts/prepare_data.py as a subprocess): a hub dataset read at a
pinned revision whose commit is recorded, document and token caps that prepare a slice, and a progress bar
with a total (so an ETA) whenever a cap bounds the work.

The hub cannot be reached here: the subprocess runs the real script with `datasets.load_dataset` (for hub
names only) and `HfApi.dataset_info` standing in for the hub — they record what they receive, and serve
real local text (CPython's bundled documentation as jsonl records) through `datasets`' own json builder.
Everything after them (filters, tokenizer, packing, cache, summary) is the real pipeline."""

import json
import os
import subprocess
import sys

import pytest

from cramming.data.sources import embedded_documents
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "prepare_data.py"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB_STAND_IN = """
import json, runpy, sys
import datasets, huggingface_hub

calls, rows, hub_answers, script = sys.argv[1:5]
real_load_dataset = datasets.load_dataset

def record(entry):
    with open(calls, "a") as out:
        out.write(json.dumps(entry) + "\\n")

def load_dataset(path, *args, **kwargs):
    if path in ("json", "text", "parquet"):  # datasets' builders for local files
        return real_load_dataset(path, *args, **kwargs)
    record({"load_dataset": [path, *args], **kwargs})
    return real_load_dataset("json", data_files=rows, split="train", streaming=True)

class Info:
    sha = "%s"

def dataset_info(self, repo_id, revision=None, **kwargs):
    record({"dataset_info": repo_id, "revision": revision})
    return Info()

datasets.load_dataset = load_dataset
if hub_answers == "yes":  # else the real client, offline (HF_HUB_OFFLINE=1)
    huggingface_hub.HfApi.dataset_info = dataset_info
sys.argv = [script, *sys.argv[5:]]
runpy.run_path(script, run_name="__main__")
""" % COMMIT
SMALL = ["data.tokenizer.vocab_size=1000", "data.validation_rows=0"]


@pytest.fixture(scope="module")
def hub_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("hub") / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": "\n".join(document)}) + "\n" for document in embedded_documents()))
    return path


def prepare_from_hub(tmp_path, hub_rows, *overrides, hub_answers=True):
    """The script against the stand-in hub: (run, the calls the hub functions received, meta.json)."""
    calls = tmp_path / "calls.jsonl"
    calls.unlink(missing_ok=True)
    run = subprocess.run([sys.executable, "-c", HUB_STAND_IN, str(calls), str(hub_rows), "yes" if hub_answers else "no",
                          str(SCRIPT), *overrides, *SMALL, f"cache_dir={tmp_path / 'cache'}"],
                         capture_output=True, text=True, timeout=300,
                         env=os.environ | {"CRAMMING_PROGRESS_EVERY_S": "0"})  # a progress line at every step
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    received = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    dataset = next(line for line in run.stdout.splitlines() if line.startswith("dataset ")).split()[1]
    return run, received, json.loads(
        (tmp_path / "cache" / "data" / os.path.basename(dataset) / "meta.json").read_text())


def final_bar(run) -> str:
    """The last progress line of the preparation (off a terminal: a line every CRAMMING_PROGRESS_EVERY_S)."""
    return [line[line.index("tokenizing: "):] for line in (run.stdout + run.stderr).splitlines()
            if "tokenizing: " in line][-1]


def test_a_branch_is_resolved_to_its_commit_which_both_passes_read_and_the_dataset_records(tmp_path, hub_rows):
    run, received, meta = prepare_from_hub(tmp_path, hub_rows, "data=wikipedia", "data.hub_revision=main",
                                           "data.max_documents=40")
    assert received[0] == {"dataset_info": "wikimedia/wikipedia", "revision": "main"}
    loads = received[1:]  # the first look, the tokenizer's sample, the main pass: each at the commit, not at "main"
    assert loads == [{"load_dataset": ["wikimedia/wikipedia", "20231101.en"], "split": "train", "streaming": True,
                      "revision": COMMIT}] * 3
    assert meta["hub"] == {"path": "wikimedia/wikipedia", "name": "20231101.en", "split": "train", "revision": "main",
                           "commit": COMMIT}
    assert (f"hub       wikimedia/wikipedia/20231101.en, split train, at commit {COMMIT} (data.hub_revision=main)"
            in run.stdout)
    assert meta["documents"]["read"] == 40 and "cap       data.max_documents=40: reached" in run.stdout
    assert final_bar(run).startswith("tokenizing: 100% (40 of 40 documents)")  # a total: with the time left


def test_a_commit_is_used_as_given_and_keys_its_own_dataset(tmp_path, hub_rows):
    _, received, pinned = prepare_from_hub(tmp_path, hub_rows, "data=wikipedia", f"data.hub_revision={COMMIT}",
                                           "data.max_documents=40")
    assert [call.get("revision") for call in received] == [COMMIT] * 3  # no dataset_info call: nothing to resolve
    _, _, unpinned = prepare_from_hub(tmp_path, hub_rows, "data=wikipedia", "data.max_documents=40")
    assert pinned["sha256"] == unpinned["sha256"]  # the same text (the stand-in serves one)
    assert pinned["config"]["hub_revision"] == COMMIT and unpinned["config"]["hub_revision"] is None
    assert len(list((tmp_path / "cache" / "data").glob("wikipedia-en-*"))) == 2  # but keyed apart


def test_offline_without_a_revision_reads_as_before_and_says_the_commit_is_not_recorded(tmp_path, hub_rows):
    run, received, meta = prepare_from_hub(tmp_path, hub_rows, "data=fineweb-edu", "data.max_documents=40",
                                           hub_answers=False)
    assert received == [{"load_dataset": ["HuggingFaceFW/fineweb-edu", "sample-10BT"], "split": "train",
                         "streaming": True}] * 3  # no revision argument at all
    assert meta["hub"]["commit"] is None and meta["hub"]["revision"] is None
    assert ("at commit" not in run.stdout
            and "commit not recorded: the hub did not answer (default branch)" in run.stdout)


def test_a_token_cap_on_a_hub_stream_gives_exactly_that_many_tokens_and_a_bar_with_a_total(tmp_path, hub_rows):
    run, _, meta = prepare_from_hub(tmp_path, hub_rows, "data=fineweb-edu", "data.max_documents=null",
                                    "data.max_tokens=30000")
    assert meta["tokens_packed"] + meta["tail_tokens_dropped"] == 30000 and meta["num_rows"] == 30000 // 128
    assert "cap       data.max_tokens=30,000: reached: a slice of the source" in run.stdout
    assert final_bar(run).startswith("tokenizing: 100% (30,000 of 30,000 tokens)")


def test_an_uncapped_hub_stream_shows_documents_and_tokens_read(tmp_path, hub_rows):
    """No cap and no size known up front: the lines count documents, with their rate and the tokens packed."""
    run, _, meta = prepare_from_hub(tmp_path, hub_rows, "data=fineweb-edu", "data.max_documents=null")
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "tokenizing: " in line]
    assert any(f" {meta['documents']['read']} documents in " in line and "/s)" in line for line in lines)
    assert any(line.endswith(f", {meta['tokens_packed'] + meta['tail_tokens_dropped']:,} tokens") for line in lines)
    assert not any("%" in line.partition("tokenizing: ")[2] for line in lines)  # no total: no percentage


def test_the_token_cap_cuts_the_same_dataset_whatever_the_batch_size(tmp_path):
    """The reader runs ahead of the packing by a few batches of data.batch_mb: the cap and the counts must not
    depend on where it happened to be."""
    metas = []
    for batch_mb in (2.0, 0.005):
        cache = tmp_path / str(batch_mb)
        run = subprocess.run([sys.executable, str(SCRIPT), "data=embedded", "data.max_tokens=25000", *SMALL,
                              f"data.batch_mb={batch_mb}", f"cache_dir={cache}"],
                             capture_output=True, text=True, timeout=300,
                             env=os.environ | {"CRAMMING_PROGRESS_EVERY_S": "0"})  # a progress line at every step
        assert run.returncode == 0, run.stderr
        assert final_bar(run).startswith("tokenizing: 100% (25,000 of 25,000 tokens)")
        (meta,) = (cache / "data").glob("*/meta.json")
        metas.append(json.loads(meta.read_text()))
    first, second = metas
    assert first["sha256"] == second["sha256"] and first["documents"] == second["documents"]
    assert first["input_megabytes"] == second["input_megabytes"]
    assert first["documents"]["read"] < len(embedded_documents())  # a slice: it stopped early
    assert first["tokens_packed"] + first["tail_tokens_dropped"] == 25000
