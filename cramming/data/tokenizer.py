"""Train, save and load the corpus tokenizer (WordPiece, BPE or Unigram) with the fixed special-token ids of
cramming.data.vocab (a pretrained one: cramming.data.pretrained_tokenizer)."""

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from cramming.data.config import TOKENIZER_KINDS, NormalizeConfig, TokenizerConfig
from cramming.data.vocab import CLS_ID, MAX_VOCAB_SIZE, SEP_ID, SPECIAL_TOKENS
from cramming.errors import CrammingError
from cramming.phase_progress import PhaseProgress

if TYPE_CHECKING:  # transformers takes about a second to import: only where a tokenizer is wrapped for it
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger("cramming.data.prepare")
CONTINUING_PREFIX = "##"  # marks a token that continues a word (WordPiece, and our BPE)
UNIGRAM_SCORE_DIGITS = 6


def build_normalizer(cfg: NormalizeConfig) -> normalizers.Normalizer | None:
    steps = []
    if cfg.strip_accents:  # decompose first so accents become separate combining marks
        steps += [normalizers.NFKD() if cfg.nfkc else normalizers.NFD(), normalizers.StripAccents()]
    elif cfg.nfkc:
        steps.append(normalizers.NFKC())
    if cfg.lowercase:
        steps.append(normalizers.Lowercase())
    if cfg.ascii_only:
        steps.append(normalizers.Replace(Regex(r"[^\x00-\x7F]"), ""))
    return normalizers.Sequence(steps) if steps else None


def _untrained_tokenizer(cfg: TokenizerConfig, normalize_cfg: NormalizeConfig) -> Tokenizer:
    if cfg.kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    elif cfg.kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix=CONTINUING_PREFIX))
    elif cfg.kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
    else:
        raise CrammingError(f"data.tokenizer.kind={cfg.kind!r} is unknown; choose one of {', '.join(TOKENIZER_KINDS)}")
    metaspace = cfg.kind == "unigram"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace() if metaspace else pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.Metaspace() if metaspace else decoders.WordPiece()
    tokenizer.normalizer = build_normalizer(normalize_cfg)
    return tokenizer


def _trainer(cfg: TokenizerConfig, special_tokens: list[str]) -> trainers.Trainer:
    common = {"vocab_size": cfg.vocab_size, "special_tokens": special_tokens, "show_progress": False}
    if cfg.kind == "wordpiece":
        return trainers.WordPieceTrainer(min_frequency=cfg.min_frequency, **common)
    if cfg.kind == "bpe":
        return trainers.BpeTrainer(min_frequency=cfg.min_frequency, continuing_subword_prefix=CONTINUING_PREFIX,
                                   **common)
    return trainers.UnigramTrainer(unk_token="[UNK]", **common)


def _continuing_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[str]:
    """"##c" for every character c of the normalized text that can continue a word (the pre-tokenizer
    keeps it in one word after a letter: not whitespace, not punctuation), sorted."""
    chars: set[str] = set()
    for start in range(0, len(texts), 1024):  # chunks of lines: few calls into the Rust normalizer
        chunk = "\n".join(texts[start : start + 1024])
        chars.update(tokenizer.normalizer.normalize_str(chunk) if tokenizer.normalizer is not None else chunk)
    pre_tokenize = tokenizer.pre_tokenizer.pre_tokenize_str
    continuing = [char for char in sorted(chars) if [word for word, _ in pre_tokenize("a" + char)] == ["a" + char]]
    return [CONTINUING_PREFIX + char for char in continuing]


def _without_added(tokenizer: Tokenizer, registered: list[str]) -> Tokenizer:
    """The trained tokenizer with `registered` kept as ordinary vocabulary, not as added (special) tokens."""
    state = json.loads(tokenizer.to_str())
    state["added_tokens"] = [token for token in state["added_tokens"] if token["content"] not in set(registered)]
    return Tokenizer.from_str(json.dumps(state))


def _pieces_in_canonical_order(tokenizer: Tokenizer) -> Tokenizer:
    """Unigram: the special tokens, then the learned pieces by score and text. Scores are rounded to
    UNIGRAM_SCORE_DIGITS decimals: the trainer's parallel sums differ in their last bits from run to run."""
    state = json.loads(tokenizer.to_str())
    special, learned = state["model"]["vocab"][: len(SPECIAL_TOKENS)], state["model"]["vocab"][len(SPECIAL_TOKENS) :]
    learned = [[piece, round(score, UNIGRAM_SCORE_DIGITS)] for piece, score in learned]
    state["model"]["vocab"] = special + sorted(learned, key=lambda piece: (-piece[1], piece[0]))
    return Tokenizer.from_str(json.dumps(state))


def _counted(texts: list[str], progress: PhaseProgress) -> Iterator[str]:
    """The texts, each counted into the progress as the trainer reads it (its merges come after: not counted)."""
    for text in texts:
        progress.advance()
        yield text


def train_tokenizer(texts: Iterable[str], tokenizer_cfg: TokenizerConfig, normalize_cfg: NormalizeConfig) -> Tokenizer:
    """Train on `texts`; fail plainly if the text cannot support the requested vocabulary.

    Deterministic: the same text and settings give the same tokenizer, ids included, in every process.
    The `tokenizers` trainers are not (huggingface/tokenizers#1794): BPE and WordPiece give the continuing
    "##" tokens ids in hash-map order and break ties between equally frequent merges by id; Unigram
    orders equally scored pieces by hash. So the "##" tokens are registered up front, sorted, and then
    turned back into ordinary tokens, and Unigram's pieces are put in a canonical order (scores rounded).
    """
    if not len(SPECIAL_TOKENS) < tokenizer_cfg.vocab_size <= MAX_VOCAB_SIZE:
        raise CrammingError(
            f"data.tokenizer.vocab_size={tokenizer_cfg.vocab_size} must be between {len(SPECIAL_TOKENS) + 1} "
            f"and {MAX_VOCAB_SIZE} (rows are stored as uint16)"
        )
    texts = list(texts)  # read twice; bounded by data.tokenizer.train_sample_mb
    tokenizer = _untrained_tokenizer(tokenizer_cfg, normalize_cfg)
    registered = [] if tokenizer_cfg.kind == "unigram" else _continuing_tokens(tokenizer, texts)
    with PhaseProgress(f"training the {tokenizer_cfg.kind} tokenizer", len(texts), "lines", log) as progress:
        trainer = _trainer(tokenizer_cfg, [*SPECIAL_TOKENS, *registered])
        tokenizer.train_from_iterator(_counted(texts, progress), trainer)
    tokenizer = _pieces_in_canonical_order(tokenizer) if tokenizer_cfg.kind == "unigram" else _without_added(
        tokenizer, registered)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == expected_id, f"special token {token} did not get id {expected_id}"
    learned = tokenizer.get_vocab_size()
    if learned < tokenizer_cfg.vocab_size:
        raise CrammingError(
            f"the tokenizer's training text supports only {learned} tokens, fewer than "
            f"data.tokenizer.vocab_size={tokenizer_cfg.vocab_size}: use more text "
            f"(data.tokenizer.train_sample_mb, more files) or a smaller vocabulary"
        )
    return with_pair_template(tokenizer)


def with_pair_template(tokenizer: Tokenizer) -> Tokenizer:
    """Pretraining rows are packed without these; GLUE inputs get [CLS] a [SEP] b [SEP]."""
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    return tokenizer


def as_transformers_tokenizer(tokenizer: Tokenizer, model_max_length: int = 128) -> "PreTrainedTokenizerFast":
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 -- as said at the top

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )


def load_tokenizer(path: str | Path) -> Tokenizer:
    path = Path(path)
    if not path.is_file():
        raise CrammingError(f"tokenizer file not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on malformed JSON
        raise CrammingError(f"cannot read tokenizer {path}: {error}") from None
