"""Pseudo-perplexity that compares across tokenizers: the PLL of held-out text (cramming.eval.pll) in bits per
character, and per token.

Per token, the figure depends on the tokenizer (more, shorter tokens are each easier to guess); per character of
the same text it does not, so runs with different tokenizers, vocabularies, mask rates or heads can be put side by
side. Texts are cut into pieces of at most PIECE_WORDS whitespace words (each well inside the model's positions);
the characters counted are those of the pieces. From a run's own held-out rows the text is what its tokenizer
decodes (normalized: lowercased, accents stripped, as the run saw it); for the same characters under every
tokenizer, give a text file.
"""

import math
from pathlib import Path
from typing import Callable

import numpy as np

from cramming.data.mlm import PackedRows
from cramming.errors import CrammingError
from cramming.eval.pll import DEFAULT_METHOD, MaskedLM, score_texts

PIECE_WORDS = 40  # whitespace words per scored piece of text
HELD_OUT_PIECE_TOKENS = 64  # a held-out row of the run is decoded in pieces of this many tokens


def pieces(text: str, words_per_piece: int = PIECE_WORDS) -> list[str]:
    """The text's non-empty lines cut into pieces of at most `words_per_piece` words, joined by single spaces."""
    out = []
    for line in text.splitlines():
        words = line.split()
        out.extend(" ".join(words[start:start + words_per_piece]) for start in range(0, len(words), words_per_piece))
    return out


def bits_per_character(lm: MaskedLM, texts: list[str], method: str = DEFAULT_METHOD, batch_size: int = 256,
                       on_rows: Callable[[int], None] | None = None) -> dict:
    """{bits_per_char, bits_per_token, characters, tokens, method} over `texts`: minus their summed PLL, in bits,
    divided by their characters (their scored tokens); `on_rows`: as score_texts'."""
    texts = scored_pieces(lm.tokenizer, texts)
    scores = score_texts(lm, texts, method, batch_size, on_rows)
    bits = -float(np.sum(scores.pll)) / math.log(2)
    characters, tokens = sum(len(text) for text in texts), int(np.sum(scores.tokens))
    return {"bits_per_char": bits / characters, "bits_per_token": bits / tokens, "characters": characters,
            "tokens": tokens, "method": method}


def scored_pieces(tokenizer, texts: list[str]) -> list[str]:
    """The texts as bits_per_character scores them: the blank ones left out, each cut to fit the positions."""
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise CrammingError("bits per character: no text to score")
    return _fitted(tokenizer, texts)


def _fitted(tokenizer, texts: list[str]) -> list[str]:
    """The texts, each one longer than the model's positions cut in halves by words until it fits."""
    limit = tokenizer.model_max_length
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]]
    out = []
    for text, length in zip(texts, lengths):
        words = text.split()
        if length <= limit or len(words) < 2:
            out.append(text)  # (a single word longer than the model's positions is truncated by the tokenizer)
        else:
            half = len(words) // 2
            out.extend(_fitted(tokenizer, [" ".join(words[:half]), " ".join(words[half:])]))
    return out


def text_file_pieces(path: str | Path, key: str = "text_file") -> list[str]:
    """The pieces of a UTF-8 text file."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as error:
        raise CrammingError(f"{key}={path}: cannot read it ({error.strerror})") from None
    except UnicodeDecodeError:
        raise CrammingError(f"{key}={path}: not UTF-8 text") from None
    found = pieces(text)
    if not found:
        raise CrammingError(f"{key}={path}: no text in it")
    return found


def held_out_pieces(dataset, tokenizer, rows: int, piece_tokens: int = HELD_OUT_PIECE_TOKENS) -> list[str]:
    """The first `rows` held-out rows of a prepared dataset (cramming.data.store), each decoded in pieces of
    `piece_tokens` tokens, special tokens dropped."""
    packed = PackedRows(dataset, held_out=True)
    count = min(rows, dataset.held_out_rows)
    texts = []
    for position in range(dataset.training_rows, dataset.training_rows + count):
        ids = packed[position]["input_ids"].tolist()
        for start in range(0, len(ids), piece_tokens):
            text = tokenizer.decode(ids[start:start + piece_tokens], skip_special_tokens=True).strip()
            if text:
                texts.append(text)
    return texts
