"""Tiny checkpoints for the GLUE tests: a real tokenizer and a randomly initialized tiny encoder."""

from pathlib import Path

import pytest
import torch

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer
from cramming.model import ModelConfig, build_mlm_model
from cramming.model.checkpoint import save_pretrained

GLUE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "glue"
TINY_ARCH = ModelConfig(
    name="glue-test-tiny", num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128
)

torch.set_flush_denormal(True)


def make_checkpoint(directory: Path, texts: list[str], vocab_size: int) -> Path:
    """A saved tiny masked-LM (never trained: the GLUE tests need weights in the right format, not skill)."""
    tokenizer_cfg = TokenizerConfig(kind="wordpiece", vocab_size=vocab_size, min_frequency=1)
    tokenizer = as_transformers_tokenizer(train_tokenizer(texts, tokenizer_cfg, NormalizeConfig()))
    torch.manual_seed(0)
    save_pretrained(build_mlm_model(TINY_ARCH, vocab_size), directory, tokenizer)
    return directory


@pytest.fixture(scope="session")
def rte_checkpoint(tmp_path_factory) -> Path:
    """A tiny checkpoint whose tokenizer was trained on RTE's training text."""
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE TSV files not found at {GLUE_DIR}")
    lines = (GLUE_DIR / "RTE" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    texts = [text for line in lines if line for text in line.split("\t")[1:3]]
    return make_checkpoint(tmp_path_factory.mktemp("rte") / "checkpoint", texts, vocab_size=2000)
