"""The microbatch search's ceiling (GpuProfile.memory_gb) and cache key (what the answer depends on),
reached without a GPU: torch.cuda's device properties stood in for."""

import hashlib
import json
from types import SimpleNamespace

import pytest
import torch

from cramming.train.microbatch import MEMORY_MARGIN, cache_key, usable_bytes

GIB = 2**30
CARD = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * GIB)
ARCH = {"name": "crammed-bert", "num_layers": 16}


@pytest.fixture
def h100(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: CARD)


def test_the_profiles_memory_gb_caps_the_search_below_the_card():
    assert usable_bytes(80 * GIB, 24.0) == pytest.approx((1 - MEMORY_MARGIN) * 24 * GIB)
    assert usable_bytes(80 * GIB, 0.0) == pytest.approx((1 - MEMORY_MARGIN) * 80 * GIB)  # 0: the card's


def test_the_cache_key_names_the_optimizer_fp8_and_what_techniques_hold(h100):
    device = torch.device("cuda", 0)
    plain = cache_key(device, ARCH, 128, "bf16", 1)
    described = {"gpu": CARD.name, "memory": CARD.total_memory, "arch": ARCH, "seq_length": 128,
                 "precision": "bf16", "ddp": False}  # the key before these were added: cached answers still match
    assert plain == hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
    assert plain == cache_key(device, ARCH, 128, "bf16", 1, optimizer="adamw", technique_bytes=0, techniques={})
    others = {cache_key(device, ARCH, 128, "bf16", 1, optimizer="lion"),
              cache_key(device, ARCH, 128, "bf16", 1, techniques={"fp8": True}),
              cache_key(device, ARCH, 128, "bf16", 1, technique_bytes=4 * GIB),
              cache_key(device, ARCH, 128, "bf16", 1, memory_gb=24.0),
              cache_key(device, ARCH, 128, "bf16", 1, techniques={"activation_checkpointing": True})}
    assert len(others) == 5 and plain not in others
