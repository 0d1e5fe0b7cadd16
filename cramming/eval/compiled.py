"""GLUE fine-tuning compiled (eval.compile; by default on a GPU): a fine-tuning step of 16 short sequences is
about 2,000 small kernels, which eager PyTorch launches one by one while the GPU waits. Compiled, they are a few
fused graphs, and the step runs without a host sync.

Shapes stay static, so each graph compiles once: batches are padded to a few widths (batching.static_width), a
short evaluation batch is filled to the full size (batching.filled), and the one short training batch of an
epoch runs eagerly beside the graphs. Our encoder runs its padded layout (Encoder.unpad = False): unpadding
needs the number of real tokens on the host, a sync, and a shape known only from the data. So a compiled
fine-tuning computes the padded batches an eager one computes unpadded: the same function, rounded
differently.
"""

import torch
from torch import nn

from cramming.model.crammed_bert import Encoder

# Graphs a fine-tuning may compile: static widths (3 at max_length 128) x training and evaluation, with room
# to spare; dynamo's default (8) would silently run the rest eagerly.
RECOMPILE_LIMIT = 32


def compiles(setting: bool | None, device: torch.device) -> bool:
    """eval.compile: null compiles on a GPU only. On the CPU, inductor's fine-tuning step measured slower than
    the eager one (docs/benchmarks.md), and each graph takes tens of seconds to build."""
    return device.type == "cuda" if setting is None else setting


def run_padded(classifier: nn.Module) -> None:
    """Our encoders inside `classifier` keep masked batches at their padded, static shape (other encoders
    never unpad)."""
    for module in classifier.modules():
        if isinstance(module, Encoder):
            module.unpad = False


class CompiledClassifier:
    """The classifier compiled for batches of the fine-tuning's two sizes (training's and evaluation's), each
    padded to a static width up to max_length; a batch of another size (the short last one of a training
    epoch) runs eagerly, so that it adds no graph. Both share the parameters."""

    def __init__(self, classifier: nn.Module, batch_sizes: tuple[int, int], max_length: int):
        run_padded(classifier)
        self.classifier, self.batch_sizes, self.max_length = classifier, batch_sizes, max_length
        self.graphs = torch.compile(classifier, dynamic=False)

    def __call__(self, **batch):
        compiled = batch["input_ids"].size(0) in self.batch_sizes
        return (self.graphs if compiled else self.classifier)(**batch)


def fresh_graphs():
    """Forget earlier fine-tunings' graphs (another task's head, another seed's module) and allow
    RECOMPILE_LIMIT graphs: a context around one fine-tuning. Inductor's on-disk cache still serves a graph it
    has built before."""
    torch.compiler.reset()
    return torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT)
