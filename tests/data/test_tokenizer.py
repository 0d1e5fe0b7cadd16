import json
import subprocess
import sys

import pytest
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.sources import embedded_documents
from cramming.data.tokenizer import as_transformers_tokenizer, load_tokenizer, train_tokenizer
from cramming.data.vocab import SPECIAL_TOKENS
from cramming.errors import CrammingError


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return ["\n".join(document) for document in embedded_documents()]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_special_token_ids_are_fixed_for_every_kind(texts, kind):
    tokenizer = train_tokenizer(texts, TokenizerConfig(kind=kind, vocab_size=1500), NormalizeConfig())
    assert [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert tokenizer.get_vocab_size() == 1500


def test_saved_tokenizer_loads_in_transformers_and_builds_pairs(texts, tmp_path):
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=2000), NormalizeConfig())
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    ids = loaded("the statement", "is executed")["input_ids"]
    assert ids[0] == 2 and ids.count(3) == 2 and ids[-1] == 3
    wrapped = as_transformers_tokenizer(load_tokenizer(tmp_path / "tokenizer.json"))
    assert (wrapped.pad_token_id, wrapped.unk_token_id, wrapped.cls_token_id) == (0, 1, 2)
    assert (wrapped.sep_token_id, wrapped.mask_token_id) == (3, 4)
    assert wrapped("the statement", "is executed")["input_ids"] == ids


def test_normalizer_options(texts):
    default = train_tokenizer(texts, TokenizerConfig(vocab_size=800), NormalizeConfig())
    assert default.normalizer.normalize_str("Ｃafé ÀB") == "cafe ab"  # NFKC width, accents, case
    raw = NormalizeConfig(nfkc=False, lowercase=False, strip_accents=False, ascii_only=False)
    assert train_tokenizer(texts, TokenizerConfig(vocab_size=800), raw).normalizer is None
    ascii_only = NormalizeConfig(strip_accents=False, ascii_only=True)
    normalizer = train_tokenizer(texts, TokenizerConfig(vocab_size=800), ascii_only).normalizer
    assert normalizer.normalize_str("naïve Ωmega") == "nave mega"


def test_vocabulary_larger_than_the_corpus_supports_is_a_plain_error():
    with pytest.raises(CrammingError, match="supports only .* fewer than data.tokenizer.vocab_size=30000"):
        train_tokenizer(["tiny corpus with few words"] * 3, TokenizerConfig(vocab_size=30000), NormalizeConfig())


def test_bad_tokenizer_settings(texts, tmp_path):
    with pytest.raises(CrammingError, match="kind='sentencepiece' is unknown"):
        train_tokenizer(texts, TokenizerConfig(kind="sentencepiece"), NormalizeConfig())
    with pytest.raises(CrammingError, match="uint16"):
        train_tokenizer(texts, TokenizerConfig(vocab_size=70000), NormalizeConfig())
    with pytest.raises(CrammingError, match="tokenizer file not found"):
        load_tokenizer(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CrammingError, match="cannot read tokenizer"):
        load_tokenizer(tmp_path / "bad.json")


TRAIN_AND_PRINT = """
import json, sys
from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.sources import embedded_documents
from cramming.data.tokenizer import train_tokenizer
texts = ["\\n".join(document) for document in embedded_documents()]
trained = {kind: json.loads(train_tokenizer(texts, TokenizerConfig(kind=kind, vocab_size=2048),
                                            NormalizeConfig()).to_str())
           for kind in ("wordpiece", "bpe", "unigram")}
print(json.dumps(trained))
"""


def test_training_is_deterministic_across_processes():
    """Each process hashes differently: two trainings in two processes must still agree."""
    runs = [subprocess.run([sys.executable, "-c", TRAIN_AND_PRINT], capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr
    first, second = (json.loads(run.stdout) for run in runs)
    assert first["wordpiece"] == second["wordpiece"] and first["bpe"] == second["bpe"]  # ids included
    # Unigram: the same pieces in the same order, except the few rare characters that its trainer appends
    # for coverage in hash order (scores differ only there)
    pieces = [[piece for piece, _ in run["unigram"]["model"]["vocab"]] for run in (first, second)]
    assert set(pieces[0]) == set(pieces[1])
    assert sum(a != b for a, b in zip(*pieces)) <= 0.01 * len(pieces[0])
    literal = Tokenizer.from_str(json.dumps(first["wordpiece"])).encode("##x", add_special_tokens=False).tokens
    assert literal == ["#", "#", "x"]  # the registered "##" tokens are ordinary tokens, never matched as text
