"""The automatic microbatch: the search against a simulated out-of-memory edge, the cache, the CPU default."""

import json

import pytest
import torch

from cramming.errors import CrammingError
from cramming.train.microbatch import CACHE_FILE, cached_search, search_microbatch

GIB = 2**30


def oom_above(threshold: int, calls: list):
    """A trial step that runs out of memory above `threshold` sequences; otherwise uses 1 MiB per sequence."""

    def step(n: int) -> int:
        calls.append(n)
        if n > threshold:
            raise torch.OutOfMemoryError(f"CUDA out of memory trying {n}")
        return n * 2**20

    return step


def test_search_doubles_up_to_the_out_of_memory_edge():
    calls = []
    size, trials = search_microbatch(oom_above(100, calls), start=32, limit=8192, usable_bytes=80 * GIB)
    assert size == 64 and calls == [32, 64, 128]
    assert [trial[2] for trial in trials] == [True, True, False] and trials[2][1] is None  # None: out of memory


def test_search_halves_when_the_start_does_not_fit():
    calls = []
    size, _ = search_microbatch(oom_above(100, calls), start=512, limit=8192, usable_bytes=80 * GIB)
    assert size == 64 and calls == [512, 256, 128, 64]


def test_search_keeps_the_memory_margin_and_the_batch_limit():
    # 256 sequences would fit (no error) but need 256 MiB, over the 200 MiB usable
    size, trials = search_microbatch(oom_above(10_000, []), start=32, limit=8192, usable_bytes=200 * 2**20)
    assert size == 128 and trials[-1] == [256, 256 * 2**20, False]
    calls = []
    assert search_microbatch(oom_above(10_000, calls), start=32, limit=48, usable_bytes=80 * GIB)[0] == 32
    assert calls == [32]  # 64 is past the limit (the batch size): never tried


def test_search_gives_up_clearly_when_nothing_fits():
    with pytest.raises(CrammingError, match="not even one sequence fits"):
        search_microbatch(oom_above(0, []), start=8, limit=8192, usable_bytes=80 * GIB)


def test_a_trial_step_that_fails_otherwise_is_one_line_naming_the_microbatch():
    """A failure other than out-of-memory (a kernel, cuDNN) stops the search at once, before the data stream."""

    def step(n: int) -> int:
        if n == 64:
            raise RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\nmore lines")
        return n * 2**20

    with pytest.raises(CrammingError, match=r"^microbatch search: the trial step of microbatch 64 failed "
                                            r"\(RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\); set "
                                            r"impl.microbatch_size"):
        search_microbatch(step, start=32, limit=8192, usable_bytes=80 * GIB)


def test_the_search_result_is_cached_per_key(tmp_path):
    searches = []

    def search():
        searches.append(1)
        return 64, [[64, 123, True]]

    assert cached_search(tmp_path, "card-a", search) == (64, "search")
    assert cached_search(tmp_path, "card-a", search) == (64, "cache")
    assert cached_search(tmp_path, "card-b", search) == (64, "search")
    assert len(searches) == 2
    stored = json.loads((tmp_path / CACHE_FILE).read_text())
    assert stored["card-a"] == {"microbatch_size": 64, "trials": [[64, 123, True]]}


def test_the_trial_step_runs_a_real_backward_and_leaves_the_model_as_it_found_it(monkeypatch):
    """cuda_step reached on the CPU: torch.cuda's memory functions stood in for, asserting the device they get.
    The trial runs the training step's own forward and backward (cramming.engine.step), then drops the
    gradients; its answer is the peak plus the memory training adds (extra_bytes)."""
    from cramming.engine.precision import Precision
    from cramming.model import ModelConfig, build_mlm_model
    from cramming.train.microbatch import cuda_step

    seen = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: seen.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: seen.append(("synchronize", device)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3 * GIB)
    torch.manual_seed(0)
    model = build_mlm_model(ModelConfig(name="tiny", num_layers=1, hidden_size=32, num_heads=2,
                                        intermediate_size=64), 200)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    backwards = []
    for p in model.parameters():
        p.register_hook(lambda grad: backwards.append(1) or grad)
    step = cuda_step(model, seq_length=32, vocab_size=200, mlm_rate=0.25, precision=Precision("fp32", "cpu"),
                     extra_bytes=GIB)
    assert step(4) == 4 * GIB
    cpu = torch.device("cpu")
    assert seen == [("reset", cpu), ("synchronize", cpu)]
    assert len(backwards) == len(before)  # every parameter got a gradient in the trial's backward
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())
