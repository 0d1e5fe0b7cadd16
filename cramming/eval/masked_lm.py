"""Any checkpoint as a masked LM the zero-shot scorer can ask for log-probabilities (cramming.eval.pll.MaskedLM):
our checkpoints, or `hf:<hub id or folder>` (our exports, a transformers BERT or ModernBERT, any AutoModelForMaskedLM).

Each masked row needs the vocabulary at one position only, so the decoder runs there alone: on our model through
its sparse-prediction path, on our export by naming that position (`masked_positions`), on another transformers
model by gathering that position before its output embeddings (where the model has them as a module; otherwise
its full logits are gathered after). A score reads the head's own distribution, special tokens included, as
training does: our export keeps those out of its predictions only (a call that names no position), and a native
BERT or ModernBERT export in its decoder bias, so its scores leave them out.
"""

import inspect
import logging
from pathlib import Path

import torch
from torch import nn

from cramming.errors import CrammingError
from cramming.eval.config import HF_PREFIX
from cramming.library_noise import without_load_report
from cramming.model.checkpoint import load_pretrained, read_config, unwrap

log = logging.getLogger(__name__)


class CrammingMaskedLM:
    """One of our masked LMs (a CrammedForMaskedLM, compiled or wrapped or not) with its tokenizer."""

    def __init__(self, model: nn.Module, tokenizer, description: str = "", provenance: dict | None = None):
        self.model, self.tokenizer = unwrap(model), tokenizer
        self.description, self.provenance = description, provenance
        self.device = next(self.model.parameters()).device

    def log_probs(self, input_ids, attention_mask, positions) -> torch.Tensor:
        model = self.model
        hidden = model.bert(input_ids, attention_mask, positions[:, None])  # (B, 1, C): the last layer at positions
        logits = model.cls(hidden, model.bert.embeddings.word_embeddings.weight)[:, 0]  # (B, V)
        return logits.float().log_softmax(-1)


class TransformersMaskedLM:
    """A transformers AutoModelForMaskedLM and its tokenizer."""

    def __init__(self, model: nn.Module, tokenizer, description: str):
        self.model, self.tokenizer, self.description, self.provenance = model.eval(), tokenizer, description, None
        self.device = next(model.parameters()).device
        self._positions: torch.Tensor | None = None
        self.names_positions = "masked_positions" in inspect.signature(model.forward).parameters  # our export
        decoder = model.get_output_embeddings()
        if isinstance(decoder, nn.Module) and not self.names_positions:
            decoder.register_forward_pre_hook(self._gather)

    def _gather(self, module, args):
        hidden = args[0]
        positions = self._positions
        if positions is None or hidden.dim() != 3 or hidden.shape[0] != positions.shape[0]:
            return None  # not (B, T, C): leave it, the logits are gathered after
        index = positions[:, None, None].expand(-1, 1, hidden.shape[-1])
        return (hidden.gather(1, index), *args[1:])  # (B, 1, C)

    def log_probs(self, input_ids, attention_mask, positions) -> torch.Tensor:
        if self.names_positions:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                masked_positions=positions[:, None]).logits  # (B, 1, V), or (B, T, V) unsparse
        else:
            self._positions = positions
            try:
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
            finally:
                self._positions = None
        if logits.shape[1] != 1:  # (B, T, V): the decoder ran everywhere
            logits = logits.gather(1, positions[:, None, None].expand(-1, 1, logits.shape[-1]))
        return logits[:, 0].float().log_softmax(-1)  # (B, V)


def open_masked_lm(reference: str | Path, device: torch.device) -> CrammingMaskedLM | TransformersMaskedLM:
    """`hf:<id or folder>` through AutoModelForMaskedLM; anything else is our checkpoint directory (masked-LM)."""
    reference = str(reference)
    if reference.startswith(HF_PREFIX):
        return _transformers(reference.removeprefix(HF_PREFIX), device)
    meta, _ = read_config(reference)
    if meta["task"] != "masked-lm":
        raise CrammingError(f"ckpt={reference}: a {meta['task']} checkpoint; zero-shot scoring needs a masked LM "
                            "(a pretraining checkpoint)")
    model, tokenizer = load_pretrained(reference)
    return CrammingMaskedLM(model.to(device), tokenizer, reference, meta.get("provenance"))


def _transformers(reference: str, device: torch.device) -> TransformersMaskedLM:
    from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: PLC0415 -- transformers for hf: only

    from cramming.eval.encoders import attempt, check_transformers_reference  # noqa: PLC0415 -- as above

    key = check_transformers_reference(reference)
    tokenizer = attempt(key, AutoTokenizer.from_pretrained, reference, trust_remote_code=True)
    if tokenizer.mask_token_id is None or not tokenizer.is_fast:
        raise CrammingError(f"{key}: its tokenizer has no mask token or is not a fast tokenizer (word boundaries)")
    with without_load_report():
        model = attempt(key, AutoModelForMaskedLM.from_pretrained, reference, trust_remote_code=True)
    return TransformersMaskedLM(model.to(device), tokenizer, f"{HF_PREFIX}{reference}")
