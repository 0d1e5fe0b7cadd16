"""Task models: masked-language modelling (pretraining) and sequence classification / regression (GLUE)."""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .encoder import Encoder
from .heads import ClassificationHead, MaskedLMHead


class Output(NamedTuple):
    """A NamedTuple (not a dataclass) so `torch.compile(fullgraph=True)` returns it without a graph break."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class CrammedForMaskedLM(nn.Module):
    """Encoder + MLM head. With sparse prediction the decoder and loss run on `masked_positions` only."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.config = cfg
        self.vocab_size = vocab_size
        self.bert = Encoder(cfg, vocab_size)
        self.cls = MaskedLMHead(cfg, vocab_size)

    def forward(self, input_ids, labels=None, masked_positions=None, attention_mask=None) -> Output:
        """input_ids, labels (B, T), labels -100 where nothing is predicted; masked_positions (B, k), sorted.

        logits are (B, k, V) on the sparse path, (B, T, V) otherwise; loss is the mean cross-entropy over
        labels != -100 (None without labels).
        """
        positions = masked_positions if self.config.sparse_prediction else None
        # k is the same for every row, so all shapes are static (compiles with fullgraph=True).
        x = self.bert(input_ids, attention_mask, positions)  # (B, k or T, C)
        if positions is not None and labels is not None:
            labels = labels.gather(1, positions)  # (B, k)
        logits = self.cls(x, self.bert.embeddings.word_embeddings.weight)  # (B, k or T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Output(loss, logits)


class CrammedForSequenceClassification(nn.Module):
    """Encoder + [CLS] classification head; cross-entropy, or MSE regression when num_labels == 1 (STS-B)."""

    def __init__(self, cfg, vocab_size: int, num_labels: int):
        super().__init__()
        self.config = cfg
        self.vocab_size = vocab_size
        self.num_labels = num_labels
        self.bert = Encoder(cfg, vocab_size)
        self.head = ClassificationHead(cfg, num_labels)

    def forward(self, input_ids, attention_mask=None, labels=None) -> Output:
        """input_ids, attention_mask (B, T); labels (B,) class ids, or float targets when num_labels == 1."""
        logits = self.head(self.bert(input_ids, attention_mask))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return Output(loss, logits)
