"""Rematerialization (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost"):
`impl.activation_checkpointing=true`.

Each layer keeps only its input for the backward pass and recomputes the rest there: activation memory
falls from all of every layer's to about one layer's, for one more forward pass of the encoder (about a
third more compute). Non-reentrant `torch.utils.checkpoint`, which torch.compile traces. The forward and
the gradients are the same as without it. Applied before the microbatch search, which therefore finds a
larger microbatch.
"""

import functools

import torch
from torch.utils.checkpoint import checkpoint

from cramming.plugins import Setting
from cramming.train.techniques.base import RunContext, Technique


def checkpoint_activations(model: torch.nn.Module) -> None:
    """Recompute each encoder layer in the backward pass (the hook transformers' gradient checkpointing
    uses too, so exports behave alike)."""
    model.bert.gradient_checkpointing = True
    model.bert._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False)


class ActivationCheckpointing(Technique):
    name, override = "activation-checkpointing", "impl.activation_checkpointing=true"
    switch = "impl.activation_checkpointing"
    # true: each layer's activations are recomputed in the backward pass instead of kept (less memory, about a
    # third more compute; the GPU microbatch search then finds a larger microbatch)
    settings = (Setting("impl.activation_checkpointing", bool, False),)
    variant_overrides = ("impl.activation_checkpointing=true",)

    @staticmethod
    def microbatch_key(cfg) -> dict:
        return {"activation_checkpointing": True}  # activations are most of a step's memory

    @classmethod
    def build(cls, cfg, run: RunContext) -> "ActivationCheckpointing":
        return cls()

    def on_model(self, model: torch.nn.Module) -> None:
        checkpoint_activations(model)
