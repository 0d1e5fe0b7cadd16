"""`data.tokenizer.kind=pretrained`: a tokenizer users already have — a hub id such as bert-base-uncased or a
local folder that `transformers.AutoTokenizer` loads — instead of one trained on the corpus.

Its vocabulary and its own normalization are kept; only the ids change: the five special tokens move to
the fixed ids every part of this project relies on ([PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4) and every
other token keeps its order after them, so tokenization gives the same tokens and the ids stay compact.
BERT-style tokenizers (WordPiece or BPE models whose special tokens carry those names) are supported.
"""

import hashlib
import json

from tokenizers import Tokenizer

from cramming import hub
from cramming.data.tokenizer import with_pair_template
from cramming.data.vocab import MAX_VOCAB_SIZE, SPECIAL_TOKENS
from cramming.errors import CrammingError

VOCABULARY_MODELS = ("WordPiece", "BPE")  # a vocabulary as a token -> id map that can be renumbered


def pretrained_tokenizer(name: str) -> Tokenizer:
    """The tokenizer at `name` (hub id or folder) with the special tokens at their fixed ids."""
    from transformers import AutoTokenizer  # noqa: PLC0415 -- transformers only for tokenizer.kind=pretrained

    offline = hub.offline_for(name)
    try:
        # a tokenizer runs no code of its own: without this, a folder whose model ships remote code (our exports)
        # stops at transformers' "Do you wish to run the custom code? [y/N]" prompt
        loaded = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as error:  # not found, offline, no tokenizer files in the folder
        reason = " ".join(str(error).split())[:300].rstrip(".") + hub.out_of_reach(offline)
        raise CrammingError(f"data.tokenizer.name={name}: cannot load a tokenizer ({reason})") from None
    if not getattr(loaded, "is_fast", False):
        raise CrammingError(f"data.tokenizer.name={name}: only a fast (tokenizers-backed) tokenizer can be used")
    return with_fixed_special_ids(loaded.backend_tokenizer, name)


def with_fixed_special_ids(tokenizer: Tokenizer, name: str) -> Tokenizer:
    """The same tokenizer, renumbered: SPECIAL_TOKENS at 0..4, every other token after them in its order."""
    state = json.loads(tokenizer.to_str())
    if state["model"]["type"] not in VOCABULARY_MODELS:
        raise CrammingError(f"data.tokenizer.name={name}: a {state['model']['type']} tokenizer; kind=pretrained "
                            f"takes {' or '.join(VOCABULARY_MODELS)} tokenizers (BERT-style)")
    vocab = tokenizer.get_vocab(with_added_tokens=True)  # token -> id
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise CrammingError(f"data.tokenizer.name={name}: its vocabulary has no {', '.join(missing)}; "
                            f"kind=pretrained needs the special tokens {', '.join(SPECIAL_TOKENS)}")
    if len(vocab) > MAX_VOCAB_SIZE:
        raise CrammingError(f"data.tokenizer.name={name}: {len(vocab)} tokens, more than the {MAX_VOCAB_SIZE} "
                            "that rows stored as uint16 can hold")
    others = sorted((token for token in vocab if token not in SPECIAL_TOKENS), key=vocab.__getitem__)
    new_id = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *others])}
    state["model"]["vocab"] = {token: new_id[token] for token in state["model"]["vocab"]}
    for added in state["added_tokens"]:
        added["id"] = new_id[added["content"]]
    state["post_processor"] = None  # replaced below by ours, with the new ids
    return with_pair_template(Tokenizer.from_str(json.dumps(state)))


def tokenizer_sha256(tokenizer: Tokenizer) -> str:
    """What identifies a pretrained tokenizer in the dataset's cache key (a hub id's files can change)."""
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
