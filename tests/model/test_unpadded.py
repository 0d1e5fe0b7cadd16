"""Padded batches run unpadded: each sequence's outputs and gradients are those it has alone."""

import dataclasses
from unittest import mock

import pytest
import torch

from cramming.model import build_classifier, build_mlm_model
from cramming.model.crammed_bert import Encoder
from cramming.model.unpadded import Unpadded

from .conftest import arch_config

V = 256
LENGTHS = [9, 20, 3, 14]


def padded_batch(lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Rows of random ids padded to `width`; the last row is padded on the left."""
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(5, V, (length,), generator=generator) for length in lengths]
    ids, mask = torch.zeros(len(rows), width, dtype=torch.long), torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        where = slice(width - len(row), width) if i == len(rows) - 1 else slice(0, len(row))
        ids[i, where], mask[i, where] = row, 1
    return ids, mask, rows


def batched_attention(attention_mask, positions):
    """The GPU layout on this CPU: attention as one padded, masked call, everything else unpadded."""
    if attention_mask is None or positions is not None:
        return None
    return Unpadded.from_mask(attention_mask)._replace(per_sequence_attention=False)


def padded_attention(attention_mask, positions):
    """The padded path: the whole padded batch through every layer."""
    return None


LAYOUTS = {"per-sequence": Encoder.__dict__["_unpadded"], "batched": staticmethod(batched_attention),
           "padded": staticmethod(padded_attention)}


def outputs_and_grads(encoder, ids, mask, layout: str):
    """Hidden states (B, T, C) and the gradients of a fixed random function of the real tokens' states."""
    encoder.zero_grad()
    with mock.patch.object(Encoder, "_unpadded", LAYOUTS[layout]):
        hidden = encoder(ids, mask)  # (B, T, C)
    real = mask.bool()
    weights = torch.randn(hidden[real].shape, generator=torch.Generator().manual_seed(1))
    (hidden[real] * weights).sum().backward()
    return hidden.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters()}


@pytest.mark.parametrize("layout", ["per-sequence", "batched"])
@pytest.mark.parametrize("name, overrides", [
    ("crammed-bert-tiny", ()), ("bert-base-tiny", ()),
    # rotary positions, and a window shorter than the rows (4 tokens each side): positions per sequence
    ("modern-bert-tiny", ("local_attention=8",)),
])
def test_unpadded_equals_padded_and_each_sequence_alone(name, overrides, layout):
    torch.manual_seed(0)
    encoder = build_mlm_model(arch_config(name, *overrides), V).eval().bert
    ids, mask, rows = padded_batch(LENGTHS, width=24)
    hidden, grads = outputs_and_grads(encoder, ids, mask, layout)
    reference, reference_grads = outputs_and_grads(encoder, ids, mask, "padded")

    real = mask.bool()
    torch.testing.assert_close(hidden[real], reference[real], rtol=1e-5, atol=1e-5)
    assert (hidden[~real] == 0).all()  # padded positions hold zeros
    for n in grads:
        torch.testing.assert_close(grads[n], reference_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    with torch.no_grad():  # right-padded rows: what the sequence gets alone (the left-padded one has other positions)
        for i, row in enumerate(rows[:-1]):
            torch.testing.assert_close(hidden[i, : len(row)], encoder(row[None])[0], rtol=1e-5, atol=1e-5)


def test_hidden_states_and_attentions_agree_with_forward():
    torch.manual_seed(0)
    model = build_mlm_model(arch_config("crammed-bert-tiny"), V).eval()
    ids, mask, _ = padded_batch(LENGTHS, width=24)
    with torch.no_grad():
        last = model.bert(ids, mask)
        states = model.bert.states(ids, mask, eager=True)
    torch.testing.assert_close(states.hidden_states[-1], last, rtol=1e-5, atol=1e-5)
    probs = states.attentions[0]  # (B, nh, T, T): no weight on padded keys, rows of real queries sum to 1
    assert (probs[~mask.bool()[:, None, None, :].expand_as(probs)] == 0).all()
    real_rows = probs.sum(-1)[mask.bool()[:, None, :].expand(-1, probs.size(1), -1)]
    torch.testing.assert_close(real_rows, torch.ones_like(real_rows))


def test_training_with_dropout_and_gradient_checkpointing_unpadded():
    torch.manual_seed(0)
    cfg = dataclasses.replace(arch_config("crammed-bert-tiny"), dropout=0.1)
    classifier = build_classifier(cfg, V, num_labels=2).train()
    ids, mask, _ = padded_batch(LENGTHS, width=24)
    classifier.bert.gradient_checkpointing = True
    classifier.bert._gradient_checkpointing_func = lambda f, *args: torch.utils.checkpoint.checkpoint(
        f, *args, use_reentrant=False)
    loss = classifier(ids, mask, labels=torch.tensor([0, 1, 1, 0])).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in classifier.parameters() if p.grad is not None)
