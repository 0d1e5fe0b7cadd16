"""data.tokenizer.kind=pretrained: a BERT-style tokenizer users already have, from a local folder (the same
code path as a hub id), renumbered so the special tokens sit at the fixed ids; its vocabulary sets the model's."""

import json
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from transformers import BertTokenizerFast

from cramming.data.pretrained_tokenizer import pretrained_tokenizer
from cramming.data.sources import embedded_documents
from cramming.data.vocab import SPECIAL_TOKENS
from cramming.errors import CrammingError
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import NO_PROBE


def bert_style_folder(directory: Path, mask_token: str = "[MASK]") -> Path:
    """A saved BertTokenizerFast whose special tokens sit where bert-base-uncased has them ([PAD]=0,
    [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103), its words from the embedded corpus."""
    words = Counter(word.strip(string.punctuation).lower() for document in embedded_documents()[:200]
                    for line in document for word in line.split())
    characters = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = [word for word, _ in words.most_common(800) if word.isalpha()]
    by_position = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = [token if token != "[MASK]" else mask_token for token in by_position]
    vocab += characters + [f"##{c}" for c in characters] + pieces
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab=str(directory / "vocab.txt"), mask_token=mask_token).save_pretrained(directory)
    return directory


def test_the_special_tokens_move_to_the_fixed_ids_and_the_tokens_stay_the_same(tmp_path):
    folder = bert_style_folder(tmp_path / "bert-style")
    theirs = BertTokenizerFast.from_pretrained(folder)
    assert theirs.convert_tokens_to_ids("[MASK]") == 103
    ours = pretrained_tokenizer(str(folder))
    assert [ours.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert ours.get_vocab_size() == len(theirs)
    text = "The Python Tutorial: defining functions, and classes with __init__ methods!"
    assert ours.encode(text).tokens == theirs(text).tokens()  # the same tokens, renumbered ids
    assert ours.encode("a", "b").tokens[0] == "[CLS]" and ours.encode("a", "b").ids[0] == 2


def test_pretraining_with_a_pretrained_tokenizer_from_the_command_line(tmp_path):
    folder = bert_style_folder(tmp_path / "bert-style")
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "pretrain.py"), "data=embedded", "data.tokenizer.kind=pretrained",
         f"data.tokenizer.name={folder}", "arch=crammed-bert-tiny", "gpu=cpu", "name=t", NO_PROBE, "train=steps",
         "train.max_steps=2", "train.batch_size=32", "impl.microbatch_size=16", "budget=1",
         f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"tokenizer {folder}: vocabulary {len(BertTokenizerFast.from_pretrained(folder))}" in run.stdout + run.stderr
    (run_dir,) = (tmp_path / "out" / "t").iterdir()
    final = run_dir / "checkpoints" / "final"
    vocabulary = json.loads((final / "tokenizer.json").read_text())["model"]["vocab"]
    assert json.loads((final / "config.json").read_text())["vocab_size"] == len(vocabulary)
    assert vocabulary["[MASK]"] == 4 and vocabulary["[PAD]"] == 0


def test_a_tokenizer_without_our_special_tokens_is_refused(tmp_path):
    folder = bert_style_folder(tmp_path / "roberta-style-mask", mask_token="<mask>")
    with pytest.raises(CrammingError, match=r"its vocabulary has no \[MASK\]; kind=pretrained needs"):
        pretrained_tokenizer(str(folder))


@pytest.mark.parametrize("overrides, words", [
    (["data.tokenizer.kind=pretrained"], "data.tokenizer.kind=pretrained needs data.tokenizer.name="),
    (["data.tokenizer.name=bert-base-uncased"], "data.tokenizer.name=bert-base-uncased is read only with "
                                                 "data.tokenizer.kind=pretrained"),
    (["data.tokenizer.kind=pretrained", "data.tokenizer.name=/no/such/folder"],
     "data.tokenizer.name=/no/such/folder: cannot load a tokenizer"),
])
def test_bad_pretrained_tokenizer_settings_are_one_line(tmp_path, overrides, words):
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "prepare_data.py"), "data=embedded",
                          f"cache_dir={tmp_path}", *overrides], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert words in line


def test_our_own_export_is_a_tokenizer_without_transformers_remote_code_prompt(tmp_path):
    """An export ships the model's code for transformers to run (trust_remote_code); its tokenizer runs none, so
    preparing data with it must not stop at transformers' "run the custom code? [y/N]" prompt."""
    from cramming.model import build_mlm_model
    from cramming.model.checkpoint import save_pretrained
    from cramming.model.export import export_to_transformers
    from tests.model.conftest import arch_config

    tokenizer = BertTokenizerFast.from_pretrained(bert_style_folder(tmp_path / "bert-style"))
    save_pretrained(build_mlm_model(arch_config("crammed-bert-tiny"), len(tokenizer)), tmp_path / "ckpt", tokenizer)
    export_to_transformers(tmp_path / "ckpt", tmp_path / "exported")
    # remote code: the prompt's cause
    assert "auto_map" in json.loads((tmp_path / "exported" / "config.json").read_text())
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "prepare_data.py"), "data=embedded",
                          "data.tokenizer.kind=pretrained", f"data.tokenizer.name={tmp_path / 'exported'}",
                          f"cache_dir={tmp_path / 'cache'}"], stdin=subprocess.PIPE, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "custom code" not in run.stdout + run.stderr
    assert f"tokenizer {tmp_path / 'exported'}: vocabulary {len(tokenizer)}" in run.stdout + run.stderr


def test_the_preflight_of_a_run_with_a_pretrained_tokenizer_plans_without_the_datas_size(tmp_path):
    """The cache's folder is not known before a pretrained tokenizer is read: the plan estimates the dataset from
    its text (not as a hub corpus of unknown size), and the passes over it from that estimate."""
    folder = bert_style_folder(tmp_path / "bert-style")
    run = in_process("pretrain", "--config-name", "quickstart", "preflight=true", "data.tokenizer.kind=pretrained",
                     f"data.tokenizer.name={folder}", f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'c'}")
    assert run.returncode == 0 and "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert "  disk: the prepared dataset (about 116 K tokens from 465 KB of text)" in run.stdout
    assert "passes over the dataset" in run.stdout
    assert any(line.startswith("preflight: the run would start") for line in run.stdout.splitlines())
