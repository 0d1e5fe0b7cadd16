"""GPU-only options that are measured slower than the default say so in one line at the start of a run,
reached here without a GPU: torch.cuda patched to report an H100 where the check asks."""

import logging

import pytest
import torch

from cramming.train.techniques import check_on_device, torchao_kernels_notice
from tests.train.runs import TINY_RUN, compose_config

H100 = torch.device("cuda", 0)


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))


def notices(caplog, overrides: list[str], device: torch.device = H100, compiled: bool = True) -> list[str]:
    cfg = compose_config(TINY_RUN + overrides)
    with caplog.at_level(logging.WARNING, logger="pretrain"):
        check_on_device(cfg, device, compiled, "bf16", 1)
    return [record.getMessage() for record in caplog.records
            if record.name == "pretrain" and record.levelno == logging.WARNING]


@pytest.mark.parametrize("overrides, words", [
    (["impl.fp8=true"], "impl.fp8=true at hidden size 128 is expected to be slower than bf16"),
    (["train.optim.name=adamw8bit"], "train.optim.name=adamw8bit saves optimizer memory, not time"),
    (["impl.offload_optimizer=true"], "impl.offload_optimizer=true saves GPU memory, not time"),
    (["train.sparsity.method=semi-structured-2:4"],
     "train.sparsity.method=semi-structured-2:4 is a sparsity ablation, not a speed-up"),
])
def test_a_slower_gpu_option_says_so_in_one_line(hopper, caplog, monkeypatch, overrides, words):
    import torchao

    monkeypatch.setattr(torchao, "skip_loading_so_files", False, raising=False)
    (notice,) = notices(caplog, overrides)
    assert notice.startswith(words) and "\n" not in notice


def test_fp8_on_a_wide_model_and_the_default_say_nothing(hopper, caplog):
    assert notices(caplog, ["impl.fp8=true", "arch.hidden_size=2048", "arch.num_heads=16"]) == []
    assert notices(caplog, []) == []
    assert notices(caplog, ["train.sparsity.method=semi-structured-2:4"], torch.device("cpu")) == []


def test_torchao_without_its_kernels_is_a_notice_naming_both_versions(hopper, caplog, monkeypatch):
    import torchao

    monkeypatch.setattr(torchao, "skip_loading_so_files", True, raising=False)
    monkeypatch.setattr(torchao, "_skip_reason", "Please upgrade to torch >= 2.11.0", raising=False)
    assert torchao_kernels_notice().startswith(f"torchao {torchao.__version__} skipped its compiled kernels "
                                               f"for torch {torch.__version__} (Please upgrade to torch >= 2.11.0)")
    assert any("skipped its compiled kernels" in line for line in notices(caplog, ["train.optim.name=adamw8bit"]))
    monkeypatch.setattr(torchao, "skip_loading_so_files", False)
    assert torchao_kernels_notice() is None
