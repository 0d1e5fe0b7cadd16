"""Training-step throughput (forward + backward + AdamW step) of our model against transformers'
BertForMaskedLM of the same depth, width and vocabulary, side by side in one process, steps interleaved.

    python scripts/benchmark.py arch=crammed-bert benchmark.layers=4 benchmark.mlm_rate=0.15
    python scripts/benchmark.py benchmark.dtype=bf16 benchmark.compile=true benchmark.batch_size=128

Writes <output_dir>/<run>.json and <run>.md; the JSON has ours.tokens_per_s, hf_bert.tokens_per_s and ratio.
"""

import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

import hydra
import torch
import transformers
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf
from transformers import BertConfig, BertForMaskedLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cramming.errors import CrammingError, exit_on_user_error  # noqa: E402
from cramming.hardware import known_profiles, model_flops_utilization  # noqa: E402
from cramming.model import ModelConfig, build_mlm_model, training_flops_per_token  # noqa: E402
from cramming.model.config import as_model_config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class BenchmarkSettings:
    layers: Optional[int] = None  # depth of both models; null keeps arch.num_layers
    batch_size: int = 8
    seq_length: int = 128
    vocab_size: int = 32768
    mlm_rate: float = 0.15
    dtype: str = "fp32"  # fp32 | bf16 | fp16 (autocast; fp16 with loss scaling)
    compile: bool = False  # torch.compile both models (ours with fullgraph=True)
    fused_adamw: bool = True  # torch's fused AdamW kernel for both models; false: the foreach implementation
    device: str = "auto"  # auto (cuda if available) | cpu | cuda
    warmup_steps: int = 2  # per model, not measured (includes compilation)
    steps: int = 6  # measured steps per model
    peak_tflops: Optional[float] = None  # device peak for MFU; null: from the matching configs/gpu profile
    seed: int = 0
    output_dir: str = "outputs/benchmark"


@dataclass
class BenchmarkConfig:
    arch: ModelConfig = MISSING
    benchmark: BenchmarkSettings = field(default_factory=BenchmarkSettings)


ConfigStore.instance().store(name="benchmark_schema", node=BenchmarkConfig)


def check_settings(s: BenchmarkSettings) -> None:
    if s.dtype not in DTYPES:
        raise CrammingError(f"benchmark.dtype must be one of {', '.join(DTYPES)}, got {s.dtype!r}")
    if s.device not in ("auto", "cpu", "cuda"):
        raise CrammingError(f"benchmark.device must be auto, cpu or cuda, got {s.device!r}")
    if s.device == "cuda" and not torch.cuda.is_available():
        raise CrammingError("benchmark.device=cuda but no CUDA device is available")
    for key in ("batch_size", "seq_length", "steps"):
        if getattr(s, key) < 1:
            raise CrammingError(f"benchmark.{key} must be at least 1, got {getattr(s, key)}")
    if s.vocab_size <= 5:
        raise CrammingError(f"benchmark.vocab_size={s.vocab_size} must exceed the 5 special tokens")
    if s.warmup_steps < 0:
        raise CrammingError(f"benchmark.warmup_steps must be at least 0, got {s.warmup_steps}")
    if not 0.0 < s.mlm_rate < 1.0 or round(s.mlm_rate * s.seq_length) < 1:
        raise CrammingError(f"benchmark.mlm_rate={s.mlm_rate} must mask 1 to {s.seq_length - 1} tokens a row")


def mlm_batch(s: BenchmarkSettings, device: torch.device) -> dict[str, torch.Tensor]:
    """Random tokens, exactly round(mlm_rate * T) masked positions per row, like the data pipeline's."""
    generator = torch.Generator().manual_seed(s.seed)
    k = round(s.mlm_rate * s.seq_length)
    input_ids = torch.randint(5, s.vocab_size, (s.batch_size, s.seq_length), generator=generator)
    scores = torch.rand(s.batch_size, s.seq_length, generator=generator)
    masked_positions = scores.topk(k, dim=1).indices.sort(dim=1).values  # (B, k)
    targets = input_ids.gather(1, masked_positions)
    labels = torch.full_like(input_ids, -100).scatter(1, masked_positions, targets)
    input_ids = input_ids.scatter(1, masked_positions, 4)  # [MASK]
    batch = {"input_ids": input_ids, "labels": labels, "masked_positions": masked_positions}
    return {key: value.to(device) for key, value in batch.items()}


def hf_bert(arch: ModelConfig, vocab_size: int, seq_length: int):
    """transformers' BertForMaskedLM with our depth, width and vocabulary; no dropout, as in pretraining."""
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=max(512, seq_length),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=arch.init_std,
    )
    return BertForMaskedLM(config)


def bert_layout(arch: ModelConfig) -> ModelConfig:
    """Our arch keys describing what BertForMaskedLM computes (for its FLOPs)."""
    return replace(arch, ffn="gelu", head_transform=True, sparse_prediction=False)


class Runner:
    """One model with its optimizer; `step()` runs and times one full training step."""

    def __init__(self, label, model, batch, s: BenchmarkSettings, device, flops_per_token):
        self.label, self.batch, self.device = label, batch, device
        self.params = sum(p.numel() for p in model.parameters())
        self.flops_per_token = flops_per_token
        self.model = model.to(device).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=1e-3,
            betas=(0.9, 0.98),
            eps=1e-12,
            weight_decay=0.01,
            fused=s.fused_adamw,
            foreach=not s.fused_adamw,
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=s.dtype == "fp16")
        self.autocast = torch.autocast(device.type, dtype=DTYPES[s.dtype], enabled=s.dtype != "fp32")
        self.times, self.peak_bytes = [], 0

    def resident_bytes(self) -> int:
        """This model's weights and optimizer state (the other model shares the device)."""
        tensors = list(self.model.parameters())
        for state in self.optimizer.state.values():
            tensors += [t for t in state.values() if torch.is_tensor(t)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def step(self, measured: bool) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            resident = self.resident_bytes()
        started = time.perf_counter()
        with self.autocast:
            loss = self.model(**self.batch).loss
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            # its own resident memory plus what its step allocated on top: the peak it would have alone
            self.peak_bytes = max(self.peak_bytes, resident + torch.cuda.max_memory_allocated() - before)
        elapsed = time.perf_counter() - started
        if measured:
            self.times.append(elapsed)
        return elapsed


def summarize(runner: Runner, tokens_per_step: int, peak_tflops: Optional[float]) -> dict:
    step_time = statistics.median(runner.times)
    tokens_per_s = tokens_per_step / step_time
    return {
        "model": runner.label,
        "parameters": runner.params,
        "tokens_per_s": tokens_per_s,
        "step_time_s": step_time,
        "step_times_s": runner.times,
        "peak_memory_gib": runner.peak_bytes / 2**30 if runner.device.type == "cuda" else None,
        "flops_per_token": runner.flops_per_token,
        "mfu": model_flops_utilization(tokens_per_s, runner.flops_per_token, peak_tflops),
    }


def device_peak_tflops(s: BenchmarkSettings, device: torch.device) -> tuple[Optional[float], str]:
    """The peak for MFU: benchmark.peak_tflops, else the half-precision tensor peak of a known GPU profile."""
    if s.peak_tflops is not None:
        return s.peak_tflops, f"{s.peak_tflops} TFLOP/s (benchmark.peak_tflops)"
    if device.type == "cuda" and s.dtype != "fp32":
        name = torch.cuda.get_device_name(device).lower()
        for profile in known_profiles().values():
            if profile.peak_tflops and any(pattern.lower() in name for pattern in profile.match):
                return profile.peak_tflops, f"{profile.peak_tflops} TFLOP/s (configs/gpu/{profile.name}.yaml)"
    return None, "unknown for this device and dtype: no MFU (set benchmark.peak_tflops)"


def cpu_name() -> str:
    model = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    return f"CPU {model}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def markdown(result: dict) -> str:
    s = result["settings"]
    rows = [
        f"{s['layers']} layers, batch {s['batch_size']} x {s['seq_length']}, vocab {s['vocab_size']}, "
        f"MLM rate {s['mlm_rate']}, {s['dtype']}, compile {'on' if s['compile'] else 'off'}, "
        f"{'fused' if s['fused_adamw'] else 'foreach'} AdamW, "
        f"{result['device']}; median of {s['steps']} interleaved steps each.",
        "",
        "| model | parameters | tokens/s | step time (s) | peak memory (GiB) | model GFLOP/token | MFU |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in ("ours", "hf_bert"):
        r = result[key]
        memory = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "n/a (CPU)"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "unknown peak"
        rows.append(
            f"| {r['model']} | {r['parameters'] / 1e6:.1f}M | {r['tokens_per_s']:.0f} "
            f"| {r['step_time_s']:.3f} | {memory} | {r['flops_per_token'] / 1e9:.3f} | {mfu} |"
        )
    rows += ["", f"Ratio (ours / BertForMaskedLM tokens/s): **{result['ratio']:.2f}x**", ""]
    return "\n".join(rows)


@hydra.main(version_base="1.3", config_path="../configs", config_name="benchmark")
@exit_on_user_error
def main(cfg: BenchmarkConfig) -> None:
    s: BenchmarkSettings = OmegaConf.to_object(cfg.benchmark)
    arch = as_model_config(cfg.arch)
    if s.layers is not None:
        arch = as_model_config(replace(arch, num_layers=s.layers))
    s.layers = arch.num_layers
    check_settings(s)
    if s.seq_length > arch.max_position_embeddings:
        raise CrammingError(
            f"benchmark.seq_length={s.seq_length} exceeds "
            f"arch.max_position_embeddings={arch.max_position_embeddings}"
        )
    if s.device == "auto":
        s.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(s.device)
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # denormals in fp32 math slow CPU steps several-fold
    else:  # fp32 runs use TF32 tensor cores, as any trainer on this GPU would
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    peak_tflops, peak_note = device_peak_tflops(s, device)
    print(f"device: {device_name}; peak: {peak_note}", flush=True)

    torch.manual_seed(s.seed)
    batch = mlm_batch(s, device)
    hf_batch = {"input_ids": batch["input_ids"], "labels": batch["labels"]}
    ours = build_mlm_model(arch, s.vocab_size)
    theirs = hf_bert(arch, s.vocab_size, s.seq_length)
    if s.compile:
        ours, theirs = torch.compile(ours, fullgraph=True), torch.compile(theirs)
    flops = training_flops_per_token(arch, s.vocab_size, s.seq_length, s.mlm_rate)
    hf_flops = training_flops_per_token(bert_layout(arch), s.vocab_size, s.seq_length, s.mlm_rate)
    runners = [
        Runner(f"ours ({arch.name})", ours, batch, s, device, flops),
        Runner("transformers BertForMaskedLM", theirs, hf_batch, s, device, hf_flops),
    ]
    load_before = os.getloadavg()
    for i in range(s.warmup_steps):
        for runner in runners:
            seconds = runner.step(measured=False)
            print(f"warm-up {i + 1}/{s.warmup_steps} {runner.label}: {seconds:.3f} s", flush=True)
    for i in range(s.steps):
        for runner in runners:  # interleaved, so drifting machine load hits both alike
            print(f"step {i + 1}/{s.steps} {runner.label}: {runner.step(measured=True):.3f} s", flush=True)

    tokens_per_step = s.batch_size * s.seq_length
    result = {
        "command": " ".join(shlex.quote(a) for a in ["python", "scripts/benchmark.py", *sys.argv[1:]]),
        "device": device_name,
        "peak": peak_note,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "settings": asdict(s),
        "arch": asdict(arch),
        "ours": summarize(runners[0], tokens_per_step, peak_tflops),
        "hf_bert": summarize(runners[1], tokens_per_step, peak_tflops),
    }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["hf_bert"]["tokens_per_s"]

    output_dir = Path(s.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    run = (
        f"{arch.name}-L{s.layers}-b{s.batch_size}x{s.seq_length}-mlm{s.mlm_rate}-{s.dtype}"
        f"{'-compiled' if s.compile else ''}{'' if s.fused_adamw else '-foreach'}-{device.type}"
    )
    (output_dir / f"{run}.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (output_dir / f"{run}.md").write_text(table)
    print("\n" + table)
    print(f"wrote {output_dir / run}.json and .md")


if __name__ == "__main__":
    main()
