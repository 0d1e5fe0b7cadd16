"""The MLM decoder's bias started at the log unigram frequencies of the training data: `train.unigram_bias=true`
(which gives the decoder its bias, `arch.decoder_bias=true`, where the arch leaves that key null).

A language model's first phase learns the unigram distribution, and little else, for about a thousand updates
(Meister et al., 2022, "On the probability-quality paradox", and the plateau this project measures at short
budgets); with the decoder tied to the embedding and no bias, the embedding itself has to carry the word
frequencies. Starting the bias at log p(token) gives the model that distribution at step 0, and leaves the
steps and the embedding to the context. The counts are the prepared dataset's own (`token_counts.npy`, counted
while it was packed and stored with it, its SHA-256 in meta.json), add-one smoothed; special tokens, which are
never a label, get the count 0. The bias trains as every other weight; it is centred (the softmax ignores a
shift). A resumed run takes the bias from its checkpoint; nothing else is kept.
"""

import numpy as np
import torch

from cramming.data.store import PreparedDataset
from cramming.data.vocab import SPECIAL_TOKENS
from cramming.errors import require
from cramming.plugins import Setting
from cramming.train.techniques.base import RunContext, Technique


def log_unigram(counts: np.ndarray) -> torch.Tensor:
    """Centred log frequencies (V,) of token counts (V,), add-one smoothed, the special tokens' counts taken as 0."""
    counts = counts.astype(np.float64).copy()
    counts[: len(SPECIAL_TOKENS)] = 0
    log_p = np.log(counts + 1) - np.log(counts.sum() + len(counts))
    return torch.from_numpy(log_p - log_p.mean()).float()


class UnigramBias(Technique):
    name, override = "unigram-bias", "train.unigram_bias"
    switch = "train.unigram_bias"
    settings = (Setting("train.unigram_bias", bool, False),)  # the decoder's bias from the data's token counts
    arch_needs = {"decoder_bias": True}

    def __init__(self):
        self.bias: torch.Tensor | None = None

    @classmethod
    def check(cls, cfg) -> None:
        if cls.enabled(cfg):
            require([(cfg.arch.decoder_bias is not False,
                      "train.unigram_bias=true sets the MLM decoder's bias, which arch.decoder_bias=false leaves out: "
                      "drop arch.decoder_bias=false")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "UnigramBias":
        return cls()

    def on_data(self, dataset: PreparedDataset) -> None:
        self.bias = log_unigram(dataset.token_counts())

    def on_model(self, model: torch.nn.Module) -> None:
        with torch.no_grad():
            model.cls.bias.copy_(self.bias.to(model.cls.bias.device))
