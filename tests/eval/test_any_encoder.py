"""GLUE for any checkpoint: `ckpt=hf:<folder or hub id>` runs the same protocol through transformers'
Auto classes. Our export scored that way gives our checkpoint's numbers; a plain BertForMaskedLM with its
own WordPiece tokenizer (segment ids included) scores too."""

import json
from collections import Counter

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

from cramming.eval.batching import collate
from cramming.eval.encoders import open_encoder
from cramming.eval.run import run_glue
from cramming.eval.tasks.registry import task_named
from cramming.model.export import export_to_transformers
from tests.commands import in_process

from .conftest import GLUE_DIR

PROTOCOL_SUBSET = {"tasks": ["rte"], "data_dir": str(GLUE_DIR), "max_train_examples": 64, "epochs": 2,
                   "seeds": [0]}


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A small BertForMaskedLM saved with a real BertTokenizerFast whose vocabulary is RTE's common words."""
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE TSV files not found at {GLUE_DIR}")
    folder = tmp_path_factory.mktemp("bert") / "bert"
    lines = (GLUE_DIR / "RTE" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    words = Counter(word for line in lines for text in line.split("\t")[1:3] for word in text.lower().split())
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(w for w, _ in words.most_common(3000) if w.isalpha())]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_our_export_scores_what_our_checkpoint_scores(rte_checkpoint, tmp_path):
    export_to_transformers(rte_checkpoint, tmp_path / "export")
    direct = run_glue(PROTOCOL_SUBSET, rte_checkpoint, tmp_path / "direct")
    exported = run_glue(PROTOCOL_SUBSET, f"hf:{tmp_path / 'export'}", tmp_path / "exported")
    assert exported["checkpoint"] == f"hf:{tmp_path / 'export'}"
    assert exported["scores"] == direct["scores"]
    history = [[epoch["train_loss"] for epoch in run["tasks"]["rte"]["seeds"]["0"]] for run in (direct, exported)]
    assert history[0] == history[1]


@pytest.mark.slow
def test_a_transformers_bert_folder_is_scored_with_its_segment_ids(bert_folder, tmp_path):
    encoder = open_encoder(f"hf:{bert_folder}", dropout=0.1)
    assert encoder.max_positions == 128
    rte = task_named("rte")()
    split = rte.encode(rte.load(str(GLUE_DIR), 0.001).train, encoder.tokenizer, 128)
    batch = collate(split, [0, 1], encoder.tokenizer.pad_token_id)
    assert batch["token_type_ids"].max() == 1  # the second sentence is segment 1
    classifier = encoder.classifier(num_labels=2, dropout=0.1, seed=0).eval()
    without_segments = {key: value for key, value in batch.items() if key != "token_type_ids"}
    assert not torch.equal(classifier(**batch).logits, classifier(**without_segments).logits)  # the model reads them
    assert classifier.config.hidden_dropout_prob == 0.1 == classifier.config.attention_probs_dropout_prob

    run = in_process("eval_glue", f"ckpt=hf:{bert_folder}", f"output_dir={tmp_path / 'g'}", "eval.tasks=[rte]",
                     f"eval.data_dir={GLUE_DIR}", "eval.max_train_examples=32", "eval.epochs=1")
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "g" / "glue_results.json").read_text())
    assert results["checkpoint"] == f"hf:{bert_folder}" and 0 <= results["scores"]["rte"]["accuracy"] <= 100


def test_the_fresh_head_comes_from_the_seed(bert_folder):
    encoder = open_encoder(f"hf:{bert_folder}", dropout=0.1)
    heads = [encoder.classifier(2, 0.1, seed).classifier.weight for seed in (0, 0, 1)]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])
    assert heads[0].std().item() == pytest.approx(0.02, rel=0.2)  # BERT's own initializer_range
