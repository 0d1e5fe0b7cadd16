"""The pseudo-log-likelihood scorer without a hub model: a naive per-token loop agrees with the batched scorer,
padding and batch composition change no score, swapping a pair flips its verdict, our checkpoint and its
transformers export score alike, a toy model whose preference is known gets the known verdicts, and real BLiMP
files read through `datasets` (a few paradigms)."""

import gzip
import math
import shutil

import numpy as np
import pytest
import torch

from cramming.eval.blimp import Pair, Paradigm, load_blimp, load_packaged, published, score_blimp
from cramming.eval.masked_lm import CrammingMaskedLM, open_masked_lm
from cramming.eval.pll import METHODS, encode, masked_rows, score_texts
from cramming.errors import CrammingError
from tests.conftest import SHARED_DATA

from .test_any_encoder import bert_folder  # noqa: F401  (fixtures: a BERT folder and its RTE vocabulary)
from .test_modernbert_folder import modernbert_folder  # noqa: F401  (and a ModernBERT folder with it)

BLIMP_DIR = SHARED_DATA / "blimp"
# the second spells its field syntax/semantics
PARADIGMS = ("anaphor_number_agreement", "principle_A_case_2", "wh_island")
SENTENCES = ["The cats sleep.", "Unbelievably, the representatives were reconsidering everything they said.",
             "A dog barked.", "Who did the senators say they admired?", "It rains."]


@pytest.fixture(scope="module")
def lm(rte_checkpoint):
    return open_masked_lm(str(rte_checkpoint), torch.device("cpu"))


@pytest.fixture(scope="module")
def blimp_dir(tmp_path_factory):
    """A folder with a few real paradigm files (one plain .jsonl, the others .jsonl.gz) and the summary file the
    published folder keeps beside them."""
    if not BLIMP_DIR.is_dir():
        pytest.skip(f"BLiMP files not found at {BLIMP_DIR}")
    folder = tmp_path_factory.mktemp("blimp")
    for uid in PARADIGMS[1:]:
        shutil.copy(BLIMP_DIR / f"{uid}.jsonl.gz", folder)
    with gzip.open(BLIMP_DIR / f"{PARADIGMS[0]}.jsonl.gz", "rt") as packed:
        (folder / f"{PARADIGMS[0]}.jsonl").write_text(packed.read())
    shutil.copy(BLIMP_DIR / "models_summary.jsonl", folder)
    return folder


def full_logits(lm, row: list[int]) -> torch.Tensor:
    """(T, V): every position's logits from the model's head (not the sparse path). Our model's forward without
    labels is a prediction, which keeps the special tokens out; a score reads the head itself."""
    ids = torch.tensor([row])
    if isinstance(lm, CrammingMaskedLM):
        return lm.model.cls(lm.model.bert(ids), lm.model.bert.embeddings.word_embeddings.weight)[0]
    return lm.model(ids).logits[0]


def naive_pll(lm, text: str, method: str) -> float:
    """One masked row at a time, the full-sequence logits of the model's head (not the sparse path)."""
    encoded = lm.tokenizer(text)
    ids, words = encoded["input_ids"], encoded.word_ids()
    total = 0.0
    for position, word in enumerate(words):
        if word is None:
            continue
        row = list(ids)
        for later in range(position, len(ids)):
            if later == position or (method == "pll-word-l2r" and words[later] == word):
                row[later] = lm.tokenizer.mask_token_id
        with torch.no_grad():
            logits = full_logits(lm, row)[position]  # (V,)
        total += logits.double().log_softmax(-1)[ids[position]].item()
    return total


@pytest.mark.parametrize("method", METHODS)
def test_a_naive_per_token_loop_equals_the_batched_scorer(lm, method):
    batched = score_texts(lm, SENTENCES, method, batch_size=7).pll
    naive = [naive_pll(lm, text, method) for text in SENTENCES]
    assert batched == pytest.approx(naive, abs=1e-5)


@pytest.mark.parametrize("folder", ["bert_folder", "modernbert_folder"])
def test_a_transformers_bert_and_modernbert_folder_score_as_the_naive_loop(folder, request):
    """Their decoder runs at the scored position only (gathered before it); the loop reads the full logits."""
    hf = open_masked_lm(f"hf:{request.getfixturevalue(folder)}", torch.device("cpu"))
    for method in METHODS:
        batched = score_texts(hf, SENTENCES, method, batch_size=5).pll
        assert batched == pytest.approx([naive_pll(hf, text, method) for text in SENTENCES], abs=1e-5)


def test_word_l2r_masks_the_later_pieces_of_a_word_and_pll_does_not(lm):
    (ids, words), = encode(lm.tokenizer, ["Unbelievably"])
    assert (words >= 0).sum() > 1  # one word in several pieces, with this small vocabulary
    l2r, positions = masked_rows(ids, words, lm.tokenizer.mask_token_id, "pll-word-l2r")
    plain, _ = masked_rows(ids, words, lm.tokenizer.mask_token_id, "pll")
    mask = lm.tokenizer.mask_token_id
    assert [int((row == mask).sum()) for row in plain] == [1] * len(positions)
    assert [int((row == mask).sum()) for row in l2r] == list(range(len(positions), 0, -1))
    assert all(row[0] == ids[0] and row[-1] == ids[-1] for row in l2r)  # [CLS] and [SEP] are context, never masked


def test_padding_and_batch_composition_do_not_change_a_score(lm):
    alone = [score_texts(lm, [text], batch_size=1000).pll[0] for text in SENTENCES]
    for batch_size in (1, 3, 16, 1000):  # rows of other lengths beside it, padded to the longest
        together = score_texts(lm, SENTENCES, batch_size=batch_size).pll
        assert together == pytest.approx(alone, abs=1e-5)
    reordered = score_texts(lm, SENTENCES[::-1], batch_size=5).pll[::-1]
    assert reordered == pytest.approx(alone, abs=1e-5)


def test_swapping_a_pairs_sentences_flips_its_verdict(lm, blimp_dir):
    paradigms = load_blimp(str(blimp_dir), pairs_per_paradigm=20)
    swapped = [Paradigm(p.uid, p.field, [Pair(pair.bad, pair.good) for pair in p.pairs]) for p in paradigms]
    right, flipped = score_blimp(lm, paradigms), score_blimp(lm, swapped)
    pll = score_texts(lm, [t for p in paradigms for pair in p.pairs for t in (pair.good, pair.bad)]).pll
    assert not np.any(pll[0::2] == pll[1::2])  # no tie, so every verdict flips
    for uid, percent in right["paradigms"].items():
        assert flipped["paradigms"][uid] == pytest.approx(100 - percent)


class UnigramLM:
    """A hand-built masked LM that ignores its context: the same log-probabilities at every position, one token
    far less likely than the others. A sentence holding that token must lose its pair."""

    def __init__(self, tokenizer, unlikely: int):
        self.tokenizer, self.device = tokenizer, torch.device("cpu")
        self.table = torch.zeros(len(tokenizer))
        self.table[unlikely] = -20.0
        self.table = self.table.log_softmax(-1)

    def log_probs(self, input_ids, attention_mask, positions):
        return self.table.expand(len(input_ids), -1)


def test_a_toy_model_with_a_known_preference_gives_the_known_verdicts(lm):
    tokenizer = lm.tokenizer
    whole_words = sorted(token for token in tokenizer.get_vocab() if token.isalpha() and len(token) >= 3)
    likely, unlikely = whole_words[:2]  # each one token: the sentences differ in that token alone
    toy = UnigramLM(tokenizer, tokenizer.convert_tokens_to_ids(unlikely))
    good, bad = f"the {likely} sat.", f"the {unlikely} sat."
    result = score_blimp(toy, [Paradigm("toy", "syntax", [Pair(good, bad), Pair(bad, good)])])
    assert result["paradigms"] == {"toy": 50.0} and result["overall"] == 50.0  # the first right, the second wrong
    scores = score_texts(toy, [good, bad]).pll
    table = toy.table.double()
    assert scores[0] - scores[1] == pytest.approx(
        (table[tokenizer.convert_tokens_to_ids(likely)] - table[tokenizer.convert_tokens_to_ids(unlikely)]).item())


def test_our_checkpoint_and_its_transformers_export_give_the_same_scores(lm, rte_checkpoint, tmp_path):
    from cramming.model.export import export_to_transformers

    export_to_transformers(rte_checkpoint, tmp_path / "export")
    exported = open_masked_lm(f"hf:{tmp_path / 'export'}", torch.device("cpu"))
    for method in METHODS:
        ours, theirs = score_texts(lm, SENTENCES, method).pll, score_texts(exported, SENTENCES, method).pll
        assert theirs == pytest.approx(ours, abs=1e-4)


def test_real_blimp_files_through_datasets(blimp_dir):
    paradigms = load_blimp(str(blimp_dir), pairs_per_paradigm=7)
    assert [p.uid for p in paradigms] == sorted(PARADIGMS)
    assert {p.uid: p.field for p in paradigms} == {"anaphor_number_agreement": "morphology",
                                                   "principle_A_case_2": "syntax_semantics", "wh_island": "syntax"}
    assert all(len(p.pairs) == 7 for p in paradigms)
    first = paradigms[0].pairs[0]
    with gzip.open(BLIMP_DIR / "anaphor_number_agreement.jsonl.gz", "rt") as handle:
        assert f'"sentence_good": "{first.good}"' in handle.readline()
    assert len(load_blimp(str(blimp_dir))[0].pairs) == 1000  # unset: every pair
    rows = published({p.uid: p.field for p in paradigms})
    assert set(rows) == {"5-gram", "LSTM", "Transformer-XL", "GPT-2", "human"}
    assert rows["5-gram"]["fields"]["morphology"] == pytest.approx(100 * 0.519)  # the summary's own number


def test_the_published_overall_numbers_come_out_of_the_packaged_summaries():
    paradigms = load_packaged(1)
    assert len(paradigms) == 67 and {p.field for p in paradigms} == {"morphology", "syntax", "semantics",
                                                                      "syntax_semantics"}
    rows = published({p.uid: p.field for p in paradigms})
    overall = {name: round(row["overall"], 1) for name, row in rows.items()}
    assert overall == {"5-gram": 61.2, "LSTM": 69.8, "Transformer-XL": 69.6, "GPT-2": 83.0, "human": 88.6}


def test_the_packaged_subset_is_the_first_pairs_of_the_real_files():
    if not BLIMP_DIR.is_dir():
        pytest.skip(f"BLiMP files not found at {BLIMP_DIR}")
    packaged = {p.uid: p for p in load_packaged()}
    assert all(len(p.pairs) == 100 for p in packaged.values())
    with gzip.open(BLIMP_DIR / "wh_island.jsonl.gz", "rt") as handle:
        import json

        real = [json.loads(next(handle)) for _ in range(100)]
    assert [(pair.good, pair.bad) for pair in packaged["wh_island"].pairs] == [
        (r["sentence_good"], r["sentence_bad"]) for r in real]
    with pytest.raises(CrammingError, match="holds 100 pairs per paradigm"):
        load_packaged(101)


def test_the_hub_path_reads_each_paradigm_config(monkeypatch):
    """The hub, faked at the datasets boundary: one config per paradigm, each a train split of records."""
    import datasets

    rows = {"wh_island": [{"UID": "wh_island", "field": "syntax", "sentence_good": "a", "sentence_bad": "b"}] * 3}
    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda name: list(rows))
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: rows[config])
    (paradigm,) = load_blimp(None, pairs_per_paradigm=2)
    assert paradigm.uid == "wh_island" and len(paradigm.pairs) == 2

    def offline(name):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "get_dataset_config_names", offline)
    with pytest.raises(CrammingError, match="cannot load nyu-mll/blimp from the hub .*give blimp_dir="):
        load_blimp(None)


def test_bits_per_character_counts_the_characters_of_the_text(lm):
    from cramming.eval.bits import bits_per_character, pieces

    text = " ".join(SENTENCES)
    result = bits_per_character(lm, pieces(text))
    pll = score_texts(lm, [text]).pll[0]
    assert result["characters"] == len(text)
    assert result["bits_per_char"] == pytest.approx(-pll / math.log(2) / len(text), rel=1e-6)
    assert result["bits_per_token"] * result["tokens"] == pytest.approx(result["bits_per_char"] * len(text))
