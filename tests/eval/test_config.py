"""The eval config: protocol defaults, overrides listed as deviations, rejected keys."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cramming.cli.eval_glue import EvalGlueConfig  # noqa: F401  (registers eval_glue.yaml's schema, eval_glue_schema)
from cramming.errors import CrammingError
from cramming.eval.config import protocol_deviations
from cramming.eval.tasks.registry import GlueConfig, as_glue_config

CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")


def _compose(overrides):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        return compose(config_name="eval_glue", overrides=["ckpt=x", *overrides])


def test_shipped_config_is_the_protocol():
    cfg = _compose([])
    glue = as_glue_config(cfg.eval)
    assert protocol_deviations(glue) == {}
    assert glue.tasks == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
    assert (glue.lr, glue.betas, glue.eps, glue.batch_size, glue.epochs) == (4e-5, [0.9, 0.98], 1e-6, 16, 5)
    assert (glue.warmup_fraction, glue.max_length, glue.dropout) == (0.1, 128, 0.1)
    assert glue.eval_batch_size > glue.batch_size


def test_overrides_are_listed_as_deviations():
    glue = as_glue_config(_compose(["eval.epochs=1", "eval.max_train_examples=64", "eval.tasks=[rte]"]).eval)
    assert protocol_deviations(glue) == {
        "epochs": {"protocol": 5, "used": 1},
        "max_train_examples": {"protocol": None, "used": 64},
    }


def test_unknown_keys_are_rejected():
    with pytest.raises(Exception, match="Could not override 'eval.lr_typo'"):
        _compose(["eval.lr_typo=1"])
    appended = _compose(["+eval.lr_typo=1"]).eval  # Hydra lets `+` add keys; the stage still refuses them
    with pytest.raises(CrammingError, match="eval config: Key 'lr_typo' not in 'GlueConfig'"):
        as_glue_config(appended)
    assert isinstance(as_glue_config(OmegaConf.create({"lr": 1e-4})), GlueConfig)
