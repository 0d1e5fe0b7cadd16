"""Parameter-efficient GLUE fine-tuning (`eval.peft=lora`): LoRA through the `peft` library.

LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models") freezes every pretrained weight
W of the encoder and learns, beside chosen Linear layers, a low-rank update: y = W x + (alpha / r) B A x, with
A (r, in) and B (out, r). B starts at zero, so the classifier starts exactly as in full fine-tuning. The
task's fresh head (the parameters no checkpoint provided: our pooler and classifier, BERT's classifier) is
not pretrained and trains fully. Biases, LayerNorms and embeddings stay frozen (peft's bias="none").

This is a protocol of its own, never averaged or compared with full fine-tuning (see cramming.eval.report).

A bottleneck adapter (Houlsby et al., 2019: down-projection, nonlinearity, up-projection after each sublayer)
is not offered: peft has none — its "adapters" are LoRA relatives, (IA)³ rescaling vectors, prompt/prefix
tuning and Llama-Adapter's prompts for decoders; bottleneck adapters live in the separate `adapters` library.
"""

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

from torch import nn

from cramming.errors import CrammingError

METHODS = ("lora",)
FULL_FINE_TUNING = "full fine-tuning"  # the protocol's label when eval.peft is null
# Hu et al.'s GLUE runs: r = 8 and alpha = 8 (alpha fixed at the first r tried: changing r then needs no new lr).
DEFAULT_RANK = 8
DEFAULT_ALPHA = 8.0
DEFAULT_DROPOUT = 0.0  # dropout on the LoRA branch's input (peft's default); eval.dropout still acts in the model
KEYS = ("peft_rank", "peft_alpha", "peft_dropout", "peft_target_modules")  # used only with eval.peft set
BASE_PREFIX = "base_model.model."  # what peft.PeftModel puts before the names of the model it wraps
REFERENCE = 'Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models"'


@dataclass(frozen=True)
class LoraSettings:
    """eval.peft=lora with its defaults filled in."""

    rank: int
    alpha: float
    dropout: float
    target_modules: Optional[tuple[str, ...]]  # names as peft matches them; None: every pretrained Linear layer

    @property
    def label(self) -> str:
        """The protocol's name in the report: the table title and the row label."""
        return f"LoRA r={self.rank}"

    def describe(self) -> str:
        targets = ", ".join(self.target_modules) if self.target_modules else "every Linear layer of the encoder"
        return f"LoRA (rank {self.rank}, alpha {self.alpha:g}, dropout {self.dropout:g}, on {targets})"

    def apply(self, model: nn.Module, head: list[str]) -> nn.Module:
        """`model` with LoRA beside its target Linear layers, everything but LoRA and the parameters named in
        `head` frozen (a peft.PeftModel; it draws LoRA's A from the global random stream)."""
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415 -- only when used: seconds to import

        targets = lora_targets(model, head_modules(head), self.target_modules)
        config = LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout, bias="none",
                            target_modules=targets)
        wrapped = get_peft_model(model, config)  # in place: `model` is its base model; freezes all but LoRA
        for name in head:
            model.get_parameter(name).requires_grad_(True)  # the fresh head is not pretrained: it trains fully
        return wrapped


def lora_settings(cfg: Any) -> Optional[LoraSettings]:
    """The LoRA settings of a GlueConfig, None for full fine-tuning; a bad value or a LoRA key set without
    eval.peft is an error naming the key."""
    if cfg.peft is None:
        unused = [f"eval.{key}={getattr(cfg, key)}" for key in KEYS if getattr(cfg, key) is not None]
        if unused:
            raise CrammingError(f"{unused[0]} is set but eval.peft is null (full fine-tuning), so nothing would "
                                "use it: add eval.peft=lora or drop it")
        return None
    if cfg.peft not in METHODS:
        raise CrammingError(f"eval.peft={cfg.peft!r} is unknown; choose null (full fine-tuning) or "
                            + ", ".join(METHODS))
    rank = DEFAULT_RANK if cfg.peft_rank is None else cfg.peft_rank
    alpha = DEFAULT_ALPHA if cfg.peft_alpha is None else cfg.peft_alpha
    dropout = DEFAULT_DROPOUT if cfg.peft_dropout is None else cfg.peft_dropout
    if rank < 1:
        raise CrammingError(f"eval.peft_rank must be at least 1, got {rank}")
    if not 0 < alpha < float("inf"):
        raise CrammingError(f"eval.peft_alpha must be positive and finite, got {alpha}")
    if not 0 <= dropout < 1:
        raise CrammingError(f"eval.peft_dropout must be in [0, 1), got {dropout}")
    targets = cfg.peft_target_modules
    if targets is not None and (not targets or not all(targets)):
        raise CrammingError(f"eval.peft_target_modules={list(targets)} must name Linear layers, or be null for all")
    return LoraSettings(rank, float(alpha), float(dropout), None if targets is None else tuple(targets))


def head_modules(head: list[str]) -> set[str]:
    """The modules owning the fresh head's parameters (`head`: their full names)."""
    return {name.rpartition(".")[0] for name in head}


def lora_targets(model: nn.Module, head: set[str], requested: Optional[tuple[str, ...]]) -> list[str]:
    """The full names of the Linear layers that get LoRA: those `requested` (peft's matching: a module's name,
    or its end after a dot), or every Linear layer outside the head."""
    encoder = [name for name, module in model.named_modules() if isinstance(module, nn.Linear) and name not in head]
    if not encoder:
        raise CrammingError(f"eval.peft=lora: the model ({type(model).__name__}) has no Linear layer to adapt")
    if requested is None:
        return encoder

    def matches(name: str, key: str) -> bool:
        return name == key or name.endswith("." + key)

    choices = ", ".join(layer_patterns(encoder))
    for key in requested:
        in_head = [name for name in sorted(head) if matches(name, key)]
        if in_head:
            raise CrammingError(f"eval.peft_target_modules: {key!r} matches {in_head[0]}, part of the fresh "
                                f"classification head (which trains fully); name the encoder's Linear layers "
                                f"so that they match no other: {choices}")
        if not any(matches(name, key) for name in encoder):
            raise CrammingError(f"eval.peft_target_modules: {key!r} names no Linear layer of the encoder; "
                                f"choose among {choices}")
    return [name for name in encoder if any(matches(name, key) for key in requested)]


def layer_patterns(names: list[str]) -> list[str]:
    """Full module names, shortened to their place within a layer where they sit in one (`bert.layer.3.
    attention.qkv` -> `attention.qkv`), each once, in model order."""
    return list(dict.fromkeys(re.sub(r"^.*?\.\d+\.", "", name) for name in names))


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """How many parameters train, of how many in the model as it runs; with LoRA also how many are LoRA's."""
    counts = {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
              "total": sum(p.numel() for p in model.parameters())}
    lora = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)
    if lora:
        counts["lora"] = lora
    return counts


def merged(model: nn.Module) -> nn.Module:
    """A LoRA-wrapped classifier as a plain one, each update B A folded into its weight (to save it); any
    other model as it is."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def record(settings: Optional[LoraSettings], model: Optional[nn.Module] = None) -> Optional[dict]:
    """What glue_results.json says of the PEFT protocol (None for full fine-tuning); with a LoRA-wrapped
    model, also the Linear layers that got LoRA."""
    if settings is None:
        return None
    entry = {"method": "lora", **asdict(settings), "label": settings.label, "reference": REFERENCE}
    entry["target_modules"] = None if settings.target_modules is None else list(settings.target_modules)
    if model is not None:
        from peft.tuners.lora import LoraLayer  # noqa: PLC0415 -- peft only with eval.peft set

        adapted = [name.removeprefix(BASE_PREFIX) for name, module in model.named_modules()
                   if isinstance(module, LoraLayer)]
        entry["adapted_layers"] = layer_patterns(adapted)
    return entry
