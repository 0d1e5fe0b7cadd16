"""Fixtures for the model tests: tiny arch configs from configs/arch and a small real tokenizer."""

import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.mlm import synthetic_mlm_batch
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer
from cramming.model import ModelConfig
from cramming.model.config import as_model_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
VOCAB_SIZE = 256
# every arch.init_scheme with a norm_scheme it accepts (skipinit with pre and post)
SCHEMES = [("normal", "pre"), ("scaled", "pre"), ("small", "pre"), ("rezero", "none"), ("skipinit", "pre"),
           ("skipinit", "post"), ("tfixup", "none"), ("deepnorm", "post")]


def arch_config(name: str, *overrides: str) -> ModelConfig:
    """configs/arch/<name>.yaml composed by Hydra (schema checks included), as a ModelConfig."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(overrides=[f"+arch={name}", *(f"arch.{o}" for o in overrides)])
    return as_model_config(cfg.arch)


@pytest.fixture(scope="session")
def tokenizer():
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 7))) for _ in range(400)]
    texts = [" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(2000)]
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=VOCAB_SIZE), NormalizeConfig())
    return as_transformers_tokenizer(tokenizer)


def mlm_batch(batch_size: int, seq_length: int, vocab_size: int, mlm_rate: float = 0.25, seed: int = 0):
    """A pretraining batch in the data pipeline's format (exactly k sorted masked positions per row), in which
    one row has fewer real targets than k, as a row short of regular tokens does."""
    batch = synthetic_mlm_batch(batch_size, seq_length, vocab_size, mlm_rate, seed)
    batch["labels"][0, batch["masked_positions"][0, 0]] = -100
    return batch
