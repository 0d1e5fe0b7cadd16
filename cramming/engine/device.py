"""The device every command runs on, and the process-wide settings around it: which device a setting names
(one rule for every command), the math settings of fast steps, and the deterministic mode."""

import contextlib
import os

import torch

from cramming.errors import CrammingError


def resolve_device(spec: str, key: str) -> torch.device:
    """`auto` (the GPU when there is one), `cpu`, `cuda` or `cuda:<index>`; `key` names the setting in errors.

    The one device rule of every command: a CUDA device always comes back with its index (the current
    device where `spec` names none), because `torch.cuda.set_device` rejects an index-less one.
    """
    try:
        device = torch.device("cuda" if spec == "auto" and torch.cuda.is_available() else
                              "cpu" if spec == "auto" else spec)
    except RuntimeError:
        raise CrammingError(f"{key}={spec!r} is not auto, cpu, cuda or cuda:<index>") from None
    if device.type not in ("cpu", "cuda"):
        raise CrammingError(f"{key}={spec!r} is not auto, cpu, cuda or cuda:<index>")
    if device.type == "cpu":
        return device
    if not torch.cuda.is_available():
        raise CrammingError(f"{key}={spec} but no CUDA GPU is available")
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise CrammingError(f"{key}={spec} but this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                            f"numbered from 0")
    return torch.device("cuda", index)


def prepare_device(device: torch.device) -> None:
    """Process-wide math settings for fast steps: no denormals on the CPU (they made steps 7x slower),
    TF32 tensor cores for fp32 matmuls on the GPU. An index-less CUDA device means the current one."""
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    else:
        torch.cuda.set_device(torch.cuda.current_device() if device.index is None else device.index)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool):
    """Within it, a run repeats bit for bit on the same machine: deterministic kernels (an error where an op
    has none), cuBLAS's fixed workspace and the math attention backend (the fused kernels' backward
    passes are not deterministic). The previous settings come back afterwards."""
    if not enabled:
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
              torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
              torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cudnn.benchmark)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # read when cuBLAS starts: set before any GPU matmul
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        algorithms, workspace, flash, efficient, cudnn_sdp, benchmark = before
        torch.use_deterministic_algorithms(algorithms)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace
        torch.backends.cuda.enable_flash_sdp(flash)
        torch.backends.cuda.enable_mem_efficient_sdp(efficient)
        torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)
        torch.backends.cudnn.benchmark = benchmark
