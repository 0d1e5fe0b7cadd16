"""Zero-shot quality during pretraining: at each validation point, BLiMP on the packaged subset and the bits per
character of the run's first held-out rows, beside the validation loss (metrics.jsonl fields `blimp` and
`bits_per_char`, summary.json, the plots, W&B). Kept off the budget clock like validation; its size is fixed
(train.validation.blimp_pairs, train.validation.bits_rows), so its time is bounded, and shown in the log line.

It reads nothing but the model: the model runs in eval mode without gradients and draws no random numbers, so
what training computes is the same with the probe on or off (train.validation.zero_shot=false).
"""

import logging
import time

import torch

from cramming.eval.bits import bits_per_character, held_out_pieces, scored_pieces
from cramming.eval.blimp import blimp_texts, load_packaged, score_blimp
from cramming.eval.masked_lm import CrammingMaskedLM
from cramming.eval.pll import DEFAULT_METHOD, count_rows, encode
from cramming.phase_progress import PhaseProgress

log = logging.getLogger("pretrain")
BATCH_SIZE = 256  # masked rows per forward pass


class ZeroShotProbe:
    """BLiMP (the first `blimp_pairs` pairs of each packaged paradigm) and bits per character (the first
    `bits_rows` held-out rows), measured on the model as it is; `tokenizer` is the run's."""

    def __init__(self, dataset, tokenizer, blimp_pairs: int, bits_rows: int):
        self.tokenizer = tokenizer
        self.paradigms = load_packaged(blimp_pairs)
        self.texts = scored_pieces(tokenizer, held_out_pieces(dataset, tokenizer, bits_rows))
        self.blimp_pairs, self.bits_rows = blimp_pairs, min(bits_rows, dataset.held_out_rows)
        self.rows = count_rows(encode(tokenizer, blimp_texts(self.paradigms) + self.texts))  # its work, for progress

    def describe(self) -> str:
        return (f"BLiMP on {self.blimp_pairs} pairs of each of {len(self.paradigms)} paradigms (the packaged subset) "
                f"and bits per character of {self.bits_rows} held-out rows")

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, precision, when: str = "") -> dict:
        """{"blimp": percent, "bits_per_char", "zero_shot_s"}; `when` names the validation in its progress."""
        started = time.perf_counter()
        lm = CrammingMaskedLM(model, self.tokenizer)
        was_training = lm.model.training
        lm.model.eval()
        try:
            with precision.autocast() if precision is not None else torch.autocast("cpu", enabled=False), \
                    PhaseProgress(f"zero-shot probe {when}".strip(), self.rows, "masked rows", log) as progress:
                blimp = score_blimp(lm, self.paradigms, DEFAULT_METHOD, BATCH_SIZE, progress.advance)["overall"]
                bits = bits_per_character(lm, self.texts, DEFAULT_METHOD, BATCH_SIZE, progress.advance)
        finally:
            lm.model.train(was_training)
        return {"blimp": blimp, "bits_per_char": bits["bits_per_char"],
                "zero_shot_s": round(time.perf_counter() - started, 3)}
