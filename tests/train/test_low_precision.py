"""impl.fp8, train.optim.name=adamw8bit and impl.offload_optimizer (cramming.train.techniques: fp8.py, offload.py;
the optimizer in cramming.train.optimizers).

No GPU here: the GPU-only options must refuse on the CPU with one line; what runs on CPU tensors is run for
real — torchao's float8 conversion (in its emulation mode), AdamW8bit's state through a checkpoint's
save / load / finite check, and a CPU run with offloading on (a no-op)."""

import io
import logging
import math

import pytest
import torch
from omegaconf import OmegaConf

from cramming.model import build_mlm_model
from cramming.pretraining import pretrain
from cramming.engine.step import set_lr
from cramming.train.checkpointing import finite_optimizer_state
from cramming.train.optimizers import build_pretraining_optimizer
from cramming.train.techniques.fp8 import convert_to_fp8, fp8_problem
from tests.model.conftest import arch_config, mlm_batch
from tests.test_bad_inputs import run_command
from tests.train.runs import NO_PROBE, STEP_RUN, compose_config, records

TINY = ["data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", "name=t", "budget=0.001", NO_PROBE]
ENCODER_LINEARS = ["attention.qkv", "attention.dense", "ffn.intermediate", "ffn.output"]


@pytest.mark.parametrize(("overrides", "words"), [
    (["impl.fp8=true"], "impl.fp8=true needs an NVIDIA GPU of compute capability 8.9 or later (Ada, Hopper); "
                        "this run is on cpu"),
    (["train.optim.name=adamw8bit"], "train.optim.name=adamw8bit (torchao's 8-bit AdamW states) needs a CUDA GPU; "
                                     "this run is on cpu"),
    (["impl.offload_optimizer=true", "train.optim.name=sophia", "impl.compile=false"],
     "impl.offload_optimizer=true does not combine with train.optim.name=sophia"),
    (["impl.offload_optimizer=true", "train.optim.name=adamw8bit"],
     "impl.offload_optimizer=true does not combine with train.optim.name=adamw8bit"),
    (["impl.offload_optimizer=true", "train.stacking.stages=[1,2]"],
     "impl.offload_optimizer=true and train.stacking do not combine"),
    (["impl.offload_optimizer=true", "train.sparsity.method=magnitude"],
     "impl.offload_optimizer=true and train.sparsity do not combine"),
])
def test_gpu_only_options_refuse_with_one_line(tmp_path, cache_dir, overrides, words):
    code, output = run_command("pretrain", *TINY, f"output_dir={tmp_path}", *overrides)
    assert code == 2 and "Traceback" not in output
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert words in line
    assert not cache_dir.exists()  # refused before any data was prepared


def test_fp8_needs_compute_capability_8_9_and_compile():
    cuda = torch.device("cuda", 0)
    assert "this one has 8.0" in fp8_problem(cuda, (8, 0), compiled=True)  # A100
    assert "this run is on cpu" in fp8_problem(torch.device("cpu"), None, compiled=True)
    assert "needs torch.compile" in fp8_problem(cuda, (9, 0), compiled=False)
    assert fp8_problem(cuda, (8, 9), compiled=True) is None  # L4, RTX 4090
    assert fp8_problem(cuda, (9, 0), compiled=True) is None  # H100, H200


@pytest.mark.parametrize("arch", ["crammed-bert-tiny", "bert-base-tiny"])
def test_fp8_converts_exactly_the_encoder_layers_linears(arch):
    from torchao.float8.float8_linear import Float8Linear

    torch.manual_seed(0)
    model = build_mlm_model(arch_config(arch), 256)
    batch = mlm_batch(4, 64, 256)
    reference, keys, parameters = model(**batch).loss, list(model.state_dict()), list(model.parameters())
    converted = convert_to_fp8(model, emulate=True)  # torchao's own emulation of the fp8 matmuls: runs on a CPU
    expected = [f"bert.layer.{i}.{name}" for i in range(2) for name in ENCODER_LINEARS]
    assert converted == expected
    assert [name for name, module in model.named_modules() if isinstance(module, Float8Linear)] == expected
    # not the head transform (bert-base), not the tied decoder; same parameters, same checkpoint keys
    assert list(model.state_dict()) == keys and all(a is b for a, b in zip(model.parameters(), parameters))
    loss = model(**batch).loss
    loss.backward()
    assert abs(loss.item() - reference.item()) < 0.01 * reference.item()
    assert all(p.grad is not None for p in model.bert.layer.parameters())


@pytest.mark.slow
def test_adamw8bit_state_survives_a_checkpoint_round_trip():
    """The CPU refuses adamw8bit in training, but its optimizer runs on CPU tensors: its 8-bit state goes
    through what a checkpoint does (finite check, torch.save, weights-only load, load_state_dict) and the
    restored optimizer continues exactly. (Two small matrices: each new shape is one more CPU compilation.)"""
    cfg = compose_config(TINY + ["train.optim.name=adamw8bit"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(128, 64))  # 8192 values: 8-bit
    optimizer = build_pretraining_optimizer(model, cfg.train.optim)
    inputs = torch.randn(3, 8, 64)

    def step(optimizer, seed):
        model.zero_grad(set_to_none=True)
        model(inputs[seed]).square().mean().backward()
        optimizer.step()

    for seed in range(2):
        set_lr(optimizer, 1e-3 * (seed + 1))  # a tensor in each group, filled in place
        step(optimizer, seed)
    saved = optimizer.state_dict()
    assert any(type(v).__name__ == "OptimState8bit" for state in saved["state"].values() for v in state.values())
    assert finite_optimizer_state(saved)
    buffer = io.BytesIO()
    torch.save({"optimizer": saved, "weights": model.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu", weights_only=True)
    restored = build_pretraining_optimizer(model, cfg.train.optim)
    restored.load_state_dict(loaded["optimizer"])
    step(optimizer, 2)
    continued = {name: p.detach().clone() for name, p in model.named_parameters()}
    model.load_state_dict(loaded["weights"])
    step(restored, 2)
    assert all(torch.equal(continued[name], p) for name, p in model.named_parameters())


def test_finite_check_reads_the_offloaded_state_layout():
    def state(value):
        return {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.full((2,), value)}}, "param_groups": []}

    assert finite_optimizer_state({"offloaded": [state(1.0), state(2.0)], "on-device": state(0.0)})
    assert not finite_optimizer_state({"offloaded": [state(1.0), state(float("nan"))], "on-device": state(0.0)})
    assert not finite_optimizer_state({"offloaded": [state(1.0)], "on-device": state(float("inf"))})


def test_offload_optimizer_is_a_noop_on_cpu_with_one_notice(shared_cache, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pretrain"):
        run_dir = pretrain(compose_config(STEP_RUN + ["train.max_steps=3", f"output_dir={tmp_path}",
                                                      "impl.offload_optimizer=true"]))
    notices = [r.getMessage() for r in caplog.records if "impl.offload_optimizer" in r.getMessage()]
    assert notices == ["impl.offload_optimizer=true: a no-op on cpu (the optimizer state is in CPU memory already)"]
    losses = [r["loss"] for r in records(run_dir)]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert (run_dir / "checkpoints/final/model.safetensors").is_file()
    assert OmegaConf.load(run_dir / "config.yaml").impl.offload_optimizer is True


def test_offloading_gives_the_microbatch_search_the_moments_it_moves_off_the_gpu(monkeypatch):
    """The search counts AdamW's two moments on the GPU for every run; on a GPU the offload technique takes
    back those of each parameter torchao offloads (its minimal_size, which offload() passes explicitly)."""
    import torchao.optim

    from cramming.train.techniques.offload import MINIMAL_SIZE, OffloadOptimizer, offload

    model = build_mlm_model(arch_config("crammed-bert-tiny"), 1000)
    offloaded = [p for p in model.parameters() if p.numel() >= MINIMAL_SIZE]
    assert 0 < len(offloaded) < len(list(model.parameters()))  # norms and scalars stay on the GPU
    assert OffloadOptimizer(on_gpu=True).extra_memory(model) == -2 * sum(4 * p.numel() for p in offloaded)
    assert OffloadOptimizer(on_gpu=False).extra_memory(model) == 0  # on the CPU nothing moves (and no search)

    received = {}
    monkeypatch.setattr(torchao.optim.CPUOffloadOptimizer, "__init__",
                        lambda self, params, optimizer_class, **kwargs: received.update(kwargs))
    offload(torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert received["minimal_size"] == MINIMAL_SIZE
