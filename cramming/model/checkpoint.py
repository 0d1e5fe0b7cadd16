"""Checkpoint directories: model.safetensors + config.json + the tokenizer, loaded without unpickling code.

config.json holds {"format": "cramming", "task": "masked-lm" | "sequence-classification", "vocab_size",
"num_labels" (classifiers only), "arch": {ModelConfig}, "provenance" (pretraining checkpoints)};
`export_to_transformers` turns such a directory into one that `transformers` loads. The model a config
declares is checked against the shapes in model.safetensors' header before any memory is allocated for it
(`check_declared_shapes`): a damaged or edited config.json is one line, not an allocation of terabytes.
"""

import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import CrammingError, size_text
from ..files import share_weights
from .config import ModelConfig, as_model_config
from .crammed_bert import CrammedForMaskedLM, CrammedForSequenceClassification
from .factory import build_classifier
from .shapes import shapes_only

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
TOKENIZER_NAME = "tokenizer.json"
_TASKS = {CrammedForMaskedLM: "masked-lm", CrammedForSequenceClassification: "sequence-classification"}


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside torch.compile and DistributedDataParallel wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def save_pretrained(model: nn.Module, directory: str | os.PathLike, tokenizer: "PreTrainedTokenizerFast",
                    provenance: dict | None = None):
    """Write `model` (masked-LM or classifier, compiled or not) and its tokenizer into `directory`;
    `provenance` (what produced it, see cramming.provenance) goes into config.json."""
    model = unwrap(model)
    if type(model) not in _TASKS:
        raise TypeError(f"cannot save a {type(model).__name__}: expected a crammed masked-LM or classifier")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # A submodule compiled on its own still leaves `_orig_mod.` inside its keys: drop it.
    state = model.state_dict()
    state = {key.replace("_orig_mod.", ""): value.detach().cpu().contiguous() for key, value in state.items()}
    config = {
        "format": "cramming",
        "task": _TASKS[type(model)],
        "vocab_size": model.vocab_size,
        "arch": dataclasses.asdict(model.config),
    }
    if isinstance(model, CrammedForSequenceClassification):
        config["num_labels"] = model.num_labels
    if provenance is not None:
        config["provenance"] = provenance
    # Write to temporary names, then rename: a crash mid-save never leaves a half-written checkpoint file.
    try:
        save_file(state, directory / (WEIGHTS_NAME + ".tmp"), metadata={"format": "pt"})
    except SafetensorError as error:  # an I/O error (a full disk) as the OSError it is
        code = re.search(r"\(os error (\d+)\)", str(error))
        if code is None:
            raise
        number = int(code.group(1))
        raise OSError(number, os.strerror(number), str(directory / WEIGHTS_NAME)) from None
    os.replace(directory / (WEIGHTS_NAME + ".tmp"), directory / WEIGHTS_NAME)
    share_weights(directory)
    (directory / (CONFIG_NAME + ".tmp")).write_text(json.dumps(config, indent=2) + "\n")
    os.replace(directory / (CONFIG_NAME + ".tmp"), directory / CONFIG_NAME)
    tokenizer.save_pretrained(directory)


def load_pretrained(directory: str | os.PathLike) -> tuple[nn.Module, "PreTrainedTokenizerFast"]:
    """The model saved in `directory` (masked-LM, or classifier if one was saved), in eval mode, and its
    tokenizer."""
    meta, cfg = read_config(directory)
    labels = {} if meta["task"] == "masked-lm" else {"num_labels": meta["num_labels"]}

    def build() -> nn.Module:
        if labels:
            return CrammedForSequenceClassification(cfg, meta["vocab_size"], **labels)
        return CrammedForMaskedLM(cfg, meta["vocab_size"])

    check_declared_shapes(directory, build, declared_sizes(cfg, meta["vocab_size"], **labels),
                          Path(directory) / CONFIG_NAME)
    model = build()
    load_weights(model, read_weights(directory), directory)
    return model.eval(), read_tokenizer(directory)


def build_classifier_from_pretrained(
    directory: str | os.PathLike, num_labels: int, dropout: float = 0.1
) -> tuple[CrammedForSequenceClassification, "PreTrainedTokenizerFast"]:
    """Encoder weights from a checkpoint, a fresh [CLS] head with `num_labels` outputs; `dropout` in the
    encoder and the head (the checkpoint's pretraining value is replaced)."""
    meta, cfg = read_config(directory)
    cfg = as_model_config(dataclasses.replace(cfg, dropout=dropout))
    check_declared_shapes(directory, lambda: CrammedForMaskedLM(cfg, meta["vocab_size"]).bert,
                          declared_sizes(cfg, meta["vocab_size"]), Path(directory) / CONFIG_NAME,
                          prefix="bert.")
    model = build_classifier(cfg, meta["vocab_size"], num_labels)
    encoder = {k: v for k, v in read_weights(directory).items() if k.startswith("bert.")}
    load_weights(model.bert, {k.removeprefix("bert."): v for k, v in encoder.items()}, directory)
    return model, read_tokenizer(directory)


def read_config(directory: str | os.PathLike) -> tuple[dict, ModelConfig]:
    """config.json of a checkpoint directory, checked, and its arch as a ModelConfig."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CrammingError(f"checkpoint directory not found: {directory}")
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise CrammingError(f"{path} is missing: not a checkpoint directory")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CrammingError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(meta, dict) or meta.get("format") != "cramming":
        raise CrammingError(f"{path} is not a cramming checkpoint (exported models load with transformers)")
    if meta.get("task") not in _TASKS.values():
        raise CrammingError(f"{path}: unknown task {meta.get('task')!r}")
    try:
        cfg = as_model_config(meta["arch"])
    except CrammingError as error:
        raise CrammingError(f"{path}: {error}") from None
    if meta["task"] == "sequence-classification" and not isinstance(meta.get("num_labels"), int):
        raise CrammingError(f"{path}: a classifier checkpoint needs an integer num_labels")
    if not isinstance(meta.get("vocab_size"), int):
        raise CrammingError(f"{path}: vocab_size missing")
    return meta, cfg


def read_weights(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint; refused if any is NaN or infinite (a diverged run's), whoever asks."""
    path = Path(directory) / WEIGHTS_NAME
    if not path.is_file():
        raise CrammingError(f"{path} is missing")
    try:
        weights = load_file(path)
    except (SafetensorError, OSError) as error:
        raise CrammingError(f"{path} is corrupt or unreadable ({error})") from None
    bad = non_finite(weights)
    if bad:
        raise CrammingError(f"{path} holds non-finite weights ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}): "
                            "the run diverged before it was written; use an earlier checkpoint")
    return weights


def weight_shapes(directory: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor in a checkpoint's model.safetensors, from its header: nothing is loaded."""
    path = Path(directory) / WEIGHTS_NAME
    if not path.is_file():
        raise CrammingError(f"{path} is missing")
    try:
        with safe_open(path, framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except (SafetensorError, OSError) as error:
        raise CrammingError(f"{path} is corrupt or unreadable ({error})") from None


def declared_sizes(cfg: ModelConfig, vocab_size: int, **more: int) -> dict[str, int]:
    """The values of a config that set the dimensions of its weights (or, num_layers, their number)."""
    return {"arch.num_layers": cfg.num_layers, "arch.hidden_size": cfg.hidden_size,
            "arch.intermediate_size": cfg.intermediate_size, "vocab_size": vocab_size, **more}


def check_declared_shapes(directory: str | os.PathLike, build: Callable[[], nn.Module], sizes: dict[str, int],
                          declared_by: str | os.PathLike, prefix: str = "") -> None:
    """Before the model `build()` makes is given any memory: each of `sizes` (declared_sizes) must be possible
    for the weights in `directory`, then the model is built on the meta device (shapes, no storage) and each
    of its weights must be in model.safetensors (under `prefix`) with the same shape. One line naming the
    key and the size otherwise; `declared_by` is the config that asked for the model."""
    held = {key.removeprefix(prefix): shape for key, shape in weight_shapes(directory).items()
            if key.startswith(prefix)}
    weights = Path(directory) / WEIGHTS_NAME
    widest = max(held, key=lambda key: max(held[key], default=1), default=None)
    width = max(held[widest], default=1) if widest else 0
    for key, value in sizes.items():
        # each layer holds at least one tensor; each other size is a dimension of some weight
        if key == "arch.num_layers":
            limit, holds = len(held), f"{len(held)} tensors"
        else:
            limit = width
            holds = (f"no dimension above {width} ({prefix}{widest} {list(held[widest])})" if widest
                     else "no tensors")
        if value > limit:
            raise CrammingError(f"{declared_by} sets {key}={value}, which does not fit the weights in "
                                f"{weights} (they hold {holds}): the config does not describe these weights "
                                "(damaged or edited?)")
    try:
        with shapes_only():
            declared = build().state_dict()
    except RuntimeError as error:
        raise CrammingError(f"{declared_by} declares a model that cannot be built ({error})") from None
    for key, tensor in declared.items():
        shape = tuple(tensor.shape)
        size = f"{tensor.numel():,} values, {size_text(tensor.numel() * tensor.element_size())}"
        if key not in held:
            raise CrammingError(f"the weights in {weights} do not fit the model of {declared_by}: it has "
                                f"{prefix}{key} {list(shape)} ({size}), which they lack")
        if shape != held[key]:
            raise CrammingError(f"the weights in {weights} do not fit the model of {declared_by}: "
                                f"{prefix}{key} is {list(shape)} there ({size}), {list(held[key])} in the "
                                "weights")


def non_finite(tensors: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors that hold a NaN or an infinity."""
    return [name for name, tensor in tensors.items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]


def read_tokenizer(directory: str | os.PathLike) -> "PreTrainedTokenizerFast":
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 -- importing cramming.model stays light

    path = Path(directory) / TOKENIZER_NAME
    if not path.is_file():
        raise CrammingError(f"{path} is missing: the checkpoint has no tokenizer")
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(directory))
    except Exception as error:  # tokenizers raises its own exception types for a damaged file
        message = f"cannot load the tokenizer in {directory} ({type(error).__name__}: {error})"
        raise CrammingError(" ".join(message.split())) from None


def load_weights(module: nn.Module, state: dict[str, torch.Tensor], directory) -> None:
    """Into `module`, or one line saying how the checkpoint's weights do not fit it."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as error:
        summary = " ".join(str(error).split())[:300]
        raise CrammingError(f"the weights in {directory} do not fit the model they are loaded into: "
                            f"{summary}") from None
