"""Which weights are "the encoder's matrices": what sparsity prunes, Muon orthogonalizes and fp8 converts.
One definition, so the techniques that act on them agree."""

from torch import nn

ENCODER_LAYERS = "bert.layer."  # the prefix of every parameter and module inside the encoder's layers


def in_encoder_layers(name: str) -> bool:
    """Whether a parameter or module of the masked-LM model (named as named_parameters/named_modules do)
    sits inside one of the encoder's layers; embeddings, norms outside layers and heads do not."""
    return name.startswith(ENCODER_LAYERS)


def encoder_matrices(model: nn.Module) -> dict[str, nn.Parameter]:
    """The 2-D weights inside the encoder's layers (attention and feed-forward), by name."""
    return {name: p for name, p in model.named_parameters() if p.dim() == 2 and in_encoder_layers(name)}
