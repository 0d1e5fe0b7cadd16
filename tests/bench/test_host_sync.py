"""The host-sync counter and guard: they see what would make a GPU's host wait (a tensor read as a number
or truth value, nonzero, boolean-mask indexing) and nothing else; on a GPU, CUDA's own sync debug mode."""

import pytest
import torch

from cramming.bench.host_sync import HostSyncError, count_host_syncs, no_host_sync

CPU = torch.device("cpu")


def test_each_syncing_operator_is_counted_once():
    x = torch.randn(16)
    assert count_host_syncs(lambda: (x * 2 + 1).softmax(0).sum(), CPU) == 0
    assert count_host_syncs(lambda: x.sum().item(), CPU) == 1
    assert count_host_syncs(lambda: bool(x.max() > 0), CPU) == 1
    assert count_host_syncs(lambda: torch.nonzero(x), CPU) == 1
    assert count_host_syncs(lambda: x[x > 0], CPU) == 1
    assert count_host_syncs(lambda: x[torch.tensor([0, 3])], CPU) == 0  # an index tensor: a static shape
    assert count_host_syncs(lambda: x[:3].tolist(), CPU) == 1  # never reaches the dispatcher: a function mode sees it
    assert count_host_syncs(lambda: x.numpy().sum(), CPU) == 1


def test_the_guard_raises_at_the_first_sync():
    x = torch.randn(4)
    with no_host_sync():
        torch.where(x > 0, x, 0.0).sum()
    with pytest.raises(HostSyncError, match="_local_scalar_dense"):
        with no_host_sync():
            float(x.sum())


def test_on_a_gpu_cudas_sync_debug_mode_counts_and_is_restored(monkeypatch):
    """Reached without a GPU: the debug mode's calls are recorded, the warnings it would raise stood in for."""
    import warnings

    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)

    def step_with_two_syncs():
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", UserWarning)

    assert count_host_syncs(step_with_two_syncs, torch.device("cuda", 0)) == 2
    assert modes == ["warn", 0]
