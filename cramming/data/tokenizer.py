"""Train, save and load the corpus tokenizer (WordPiece, BPE or Unigram) with fixed special-token ids."""

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.errors import CrammingError

# Trainers add special tokens first and in this order, so the ids never depend on the corpus.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
MAX_VOCAB_SIZE = 2**16  # rows are stored as uint16
TOKENIZER_KINDS = ("wordpiece", "bpe", "unigram")


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


def _untrained_tokenizer(cfg: TokenizerConfig) -> tuple[Tokenizer, trainers.Trainer]:
    special = list(SPECIAL_TOKENS)
    if cfg.kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=special, show_progress=False
        )
    elif cfg.kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.BpeTrainer(
            vocab_size=cfg.vocab_size,
            min_frequency=cfg.min_frequency,
            special_tokens=special,
            continuing_subword_prefix="##",
            show_progress=False,
        )
    elif cfg.kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=cfg.vocab_size, special_tokens=special, unk_token="[UNK]", show_progress=False
        )
    else:
        raise CrammingError(f"data.tokenizer.kind={cfg.kind!r} is unknown; choose one of {', '.join(TOKENIZER_KINDS)}")
    return tokenizer, trainer


def train_tokenizer(texts: Iterable[str], tokenizer_cfg: TokenizerConfig, normalize_cfg: NormalizeConfig) -> Tokenizer:
    """Train on `texts`; fail plainly if the text cannot support the requested vocabulary.

    Special-token ids are fixed. The learned part is not bit-reproducible across processes: the
    `tokenizers` trainers break ties between equally frequent merges in hash-map order, so two
    trainings on the same text can differ in a few rare tokens. The dataset cache pins one result.
    """
    if not len(SPECIAL_TOKENS) < tokenizer_cfg.vocab_size <= MAX_VOCAB_SIZE:
        raise CrammingError(
            f"data.tokenizer.vocab_size={tokenizer_cfg.vocab_size} must be between {len(SPECIAL_TOKENS) + 1} "
            f"and {MAX_VOCAB_SIZE} (rows are stored as uint16)"
        )
    tokenizer, trainer = _untrained_tokenizer(tokenizer_cfg)
    tokenizer.normalizer = build_normalizer(normalize_cfg)
    tokenizer.train_from_iterator(texts, trainer)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == expected_id, f"special token {token} did not get id {expected_id}"
    learned = tokenizer.get_vocab_size()
    if learned < tokenizer_cfg.vocab_size:
        raise CrammingError(
            f"the tokenizer's training text supports only {learned} tokens, fewer than "
            f"data.tokenizer.vocab_size={tokenizer_cfg.vocab_size}: use more text "
            f"(data.tokenizer.train_sample_mb, more files) or a smaller vocabulary"
        )
    # Pretraining rows are packed without these; GLUE inputs get [CLS] a [SEP] b [SEP].
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    return tokenizer


def as_transformers_tokenizer(tokenizer: Tokenizer, model_max_length: int = 128) -> PreTrainedTokenizerFast:
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
