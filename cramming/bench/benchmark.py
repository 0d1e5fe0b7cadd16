"""Training-step throughput (forward + backward + AdamW step) of our model against transformers'
BertForMaskedLM of the same depth, width and vocabulary, side by side in one process, steps interleaved.

Writes <output_dir>/<run>.json and <run>.md; the JSON has ours.tokens_per_s, hf_bert.tokens_per_s and ratio.
One concept, the side-by-side comparison, from its two models to its report.
"""

import json
import os
import shlex
import statistics
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from cramming.bench.host_sync import count_host_syncs
from cramming.bench.inspect import compile_counts, operators_markdown, top_operators
from cramming.bench.peak import measured_peak_tflops, model_gemm_shapes
from cramming.bench.timing import TimedStep
from cramming.bench.variants import check_variants, variant_step
from cramming.data.mlm import synthetic_mlm_batch
from cramming.data.vocab import SPECIAL_TOKENS
from cramming.engine.device import prepare_device, resolve_device
from cramming.errors import CrammingError
from cramming.engine.precision import Precision
from cramming.engine.hardware import DTYPES, known_profiles, matching_profile, model_flops_utilization
from cramming.model import ModelConfig, build_mlm_model, training_flops_per_token
from cramming.model.config import as_model_config
from cramming.provenance import cpu_model


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class BenchmarkSettings:
    layers: Optional[int] = None  # depth of both models; null keeps arch.num_layers
    batch_size: int = 8
    seq_length: int = 128
    vocab_size: int = 32768
    mlm_rate: float = 0.15
    dtype: str = "fp32"  # fp32 | bf16 | fp16 (autocast; fp16 with loss scaling)
    compile: bool = False  # torch.compile both models (ours with fullgraph=True)
    # with compile: default | reduce-overhead (CUDA graphs) | max-autotune (autotuned GEMMs and CUDA graphs, the
    # reference implementation's GPU setting) | max-autotune-no-cudagraphs
    compile_mode: str = "default"
    fused_adamw: bool = True  # torch's fused AdamW kernel for both models; false: the foreach implementation
    device: str = "auto"  # auto (cuda if available) | cpu | cuda
    warmup_steps: int = 2  # per model, not measured (includes compilation)
    steps: int = 6  # measured steps per model
    peak_tflops: Optional[float] = None  # device peak for MFU; null: from the matching configs/gpu profile
    profile: bool = False  # also profile 2 steps of our model: the top operators by self time, and their share
    # our step with one option on, each timed against the default in the same run (cramming.bench.variants):
    # fp8 | adamw8bit | offload (CUDA) | activation-checkpointing
    variants: list[str] = field(default_factory=list)
    seed: int = 0
    output_dir: str = "outputs/benchmark"


@dataclass
class BenchmarkConfig:
    arch: ModelConfig = MISSING
    benchmark: BenchmarkSettings = field(default_factory=BenchmarkSettings)


ConfigStore.instance().store(name="benchmark_schema", node=BenchmarkConfig)


def check_settings(s: BenchmarkSettings, arch: ModelConfig) -> None:
    if s.compile_mode not in COMPILE_MODES:
        raise CrammingError(f"benchmark.compile_mode must be one of {', '.join(COMPILE_MODES)}, got {s.compile_mode!r}")
    if s.compile_mode != "default" and not s.compile:
        raise CrammingError(f"benchmark.compile_mode={s.compile_mode} needs benchmark.compile=true")
    if s.dtype not in DTYPES:
        raise CrammingError(f"benchmark.dtype must be one of {', '.join(DTYPES)}, got {s.dtype!r}")
    if s.device not in ("auto", "cpu", "cuda"):
        raise CrammingError(f"benchmark.device must be auto, cpu or cuda, got {s.device!r}")
    for key in ("batch_size", "seq_length", "steps"):
        if getattr(s, key) < 1:
            raise CrammingError(f"benchmark.{key} must be at least 1, got {getattr(s, key)}")
    if s.vocab_size <= len(SPECIAL_TOKENS):
        raise CrammingError(f"benchmark.vocab_size={s.vocab_size} must exceed the {len(SPECIAL_TOKENS)} special tokens")
    if s.warmup_steps < 0:
        raise CrammingError(f"benchmark.warmup_steps must be at least 0, got {s.warmup_steps}")
    if not 0.0 < s.mlm_rate < 1.0 or round(s.mlm_rate * s.seq_length) < 1:
        raise CrammingError(f"benchmark.mlm_rate={s.mlm_rate} must mask 1 to {s.seq_length - 1} tokens a row")
    if s.seq_length > arch.max_position_embeddings:
        raise CrammingError(f"benchmark.seq_length={s.seq_length} exceeds "
                            f"arch.max_position_embeddings={arch.max_position_embeddings}")


def hf_bert(arch: ModelConfig, vocab_size: int, seq_length: int):
    """transformers' BertForMaskedLM with our depth, width and vocabulary; no dropout, as in pretraining."""
    from transformers import BertConfig, BertForMaskedLM  # noqa: PLC0415 -- transformers: only when the benchmark runs

    config = BertConfig(
        vocab_size=vocab_size, hidden_size=arch.hidden_size, num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads, intermediate_size=arch.intermediate_size,
        max_position_embeddings=max(512, seq_length), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=arch.init_std,
    )
    return BertForMaskedLM(config)


def bert_layout(arch: ModelConfig) -> ModelConfig:
    """Our arch keys describing what BertForMaskedLM computes (for its FLOPs)."""
    return replace(arch, ffn="gelu", head_transform=True, sparse_prediction=False)


def summarize(label: str, step: TimedStep, times: list[float], tokens_per_step: int, flops_per_token: float,
              executed_flops_per_token: float, peak_tflops: Optional[float], measured_peak: float) -> dict:
    """flops_per_token: the analytic model count; executed_flops_per_token: FlopCounterMode's count of what
    the step runs (attention, the sparse head), the figure MFU is usually quoted on."""
    tokens_per_s = tokens_per_step / statistics.median(times)
    return {
        "model": label,
        "parameters": sum(p.numel() for p in step.model.parameters()),
        "tokens_per_s": tokens_per_s,
        "step_time_s": statistics.median(times),
        "step_times_s": times,
        "peak_memory_gib": step.peak_bytes / 2**30 if step.device.type == "cuda" else None,
        "flops_per_token": flops_per_token,
        "mfu": model_flops_utilization(tokens_per_s, flops_per_token, peak_tflops),  # against the datasheet
        "mfu_measured": model_flops_utilization(tokens_per_s, flops_per_token, measured_peak),  # against this device
        "executed_flops_per_token": executed_flops_per_token,
        "mfu_executed": model_flops_utilization(tokens_per_s, executed_flops_per_token, peak_tflops),
        "mfu_executed_measured": model_flops_utilization(tokens_per_s, executed_flops_per_token, measured_peak),
    }


def against_default(variant: dict, default: dict) -> dict:
    """A variant's figures with its tokens/s and peak memory as ratios to the default step's."""
    memory = (variant["peak_memory_gib"] / default["peak_memory_gib"]
              if variant["peak_memory_gib"] and default["peak_memory_gib"] else None)
    return {**variant, "tokens_per_s_vs_default": variant["tokens_per_s"] / default["tokens_per_s"],
            "peak_memory_vs_default": memory}


def device_peak_tflops(s: BenchmarkSettings, device: torch.device) -> tuple[Optional[float], str]:
    """The peak for MFU: benchmark.peak_tflops, else the half-precision tensor peak of a known GPU profile."""
    if s.peak_tflops is not None:
        return s.peak_tflops, f"{s.peak_tflops} TFLOP/s (benchmark.peak_tflops)"
    if device.type == "cuda" and s.dtype != "fp32":
        profile = matching_profile(torch.cuda.get_device_name(device), known_profiles())
        if profile is not None and profile.peak_tflops:
            return profile.peak_tflops, f"{profile.peak_tflops} TFLOP/s (configs/gpu/{profile.name}.yaml)"
    return None, "unknown for this device and dtype: no MFU (set benchmark.peak_tflops)"


def cpu_name() -> str:
    return f"CPU {cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def markdown(result: dict) -> str:
    s = result["settings"]
    rows = [
        f"{s['layers']} layers, batch {s['batch_size']} x {s['seq_length']}, vocab {s['vocab_size']}, "
        f"MLM rate {s['mlm_rate']}, {s['dtype']}, compile {s['compile_mode'] if s['compile'] else 'off'}, "
        f"{'fused' if s['fused_adamw'] else 'foreach'} AdamW, "
        f"{result['device']}; median of {s['steps']} interleaved steps each.",
        "",
        "| model | parameters | tokens/s | step time (s) | peak memory (GiB) | model GFLOP/token | MFU (datasheet) "
        "| MFU (measured peak) | executed GFLOP/token | executed MFU (datasheet) | executed MFU (measured peak) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in [result["ours"], result["hf_bert"], *result["variants"].values()]:
        memory = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "n/a (CPU)"
        mfu, executed = (f"{100 * r[key]:.1f}%" if r[key] is not None else "unknown peak"
                         for key in ("mfu", "mfu_executed"))
        rows.append(f"| {r['model']} | {r['parameters'] / 1e6:.1f}M | {r['tokens_per_s']:.0f} "
                    f"| {r['step_time_s']:.3f} | {memory} | {r['flops_per_token'] / 1e9:.3f} | {mfu} "
                    f"| {100 * r['mfu_measured']:.1f}% | {r['executed_flops_per_token'] / 1e9:.3f} | {executed} "
                    f"| {100 * r['mfu_executed_measured']:.1f}% |")
    for name, r in result["variants"].items():
        memory = f", peak memory {r['peak_memory_vs_default']:.2f}x" if r["peak_memory_vs_default"] else ""
        rows.append(f"\nVariant {name}: {r['tokens_per_s_vs_default']:.2f}x the default's tokens/s{memory}.")
    rows += ["", f"Ratio (ours / BertForMaskedLM tokens/s): **{result['ratio']:.2f}x**. Measured peak: "
             f"{result['measured_peak_tflops']:.3f} TFLOP/s (the step's GEMM shapes in {s['dtype']}, weighted as the "
             "step runs them, best of 5).", ""]
    syncs = result["host_syncs_per_step_ours"]
    rows += [f"Host syncs in one step of ours: {syncs if syncs is not None else 'not counted (compiled, on the CPU)'}.",
             ""]
    if result["compile"] is not None:
        c = result["compile"]
        rows += [f"torch.compile (both models): {c['graphs_compiled']} graphs compiled in warm-up, "
                 f"{c['graph_breaks']} graph breaks, {c['recompiles_after_warmup']} recompilations in the measured "
                 "steps.", ""]
    if result["top_operators_ours"] is not None:
        where = "device" if result["settings"]["device"] == "cuda" else "CPU"
        rows += ["Our step's top operators (torch.profiler, 2 steps):", "",
                 operators_markdown(result["top_operators_ours"], where), ""]
    return "\n".join(rows)


def run_name(s: BenchmarkSettings, arch_name: str, device_type: str) -> str:
    """The output files' name: every setting that changes the figures, so two runs into one folder keep both."""
    compiled = "" if not s.compile else "-compiled" if s.compile_mode == "default" else f"-compiled-{s.compile_mode}"
    return (f"{arch_name}-L{s.layers}-b{s.batch_size}x{s.seq_length}-mlm{s.mlm_rate}-{s.dtype}{compiled}"
            f"{'' if s.fused_adamw else '-foreach'}{''.join('-' + name for name in s.variants)}-{device_type}")


def run_benchmark(cfg: BenchmarkConfig) -> Path:
    """Time both models, print each step and the table, write <run>.json and <run>.md; returns the JSON."""
    import transformers  # noqa: PLC0415 -- only when the benchmark runs

    s: BenchmarkSettings = OmegaConf.to_object(cfg.benchmark)
    arch = as_model_config(cfg.arch)
    arch = as_model_config(replace(arch, num_layers=s.layers)) if s.layers is not None else arch
    s.layers = arch.num_layers
    check_settings(s, arch)
    device = resolve_device(s.device, "benchmark.device")
    check_variants(s.variants, device, s.compile, s.dtype)
    s.device = device.type
    prepare_device(device)  # no denormals on the CPU; TF32 for fp32 on a GPU, as any trainer there would use
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    peak_tflops, peak_note = device_peak_tflops(s, device)
    print(f"device: {device_name}; peak: {peak_note}", flush=True)

    torch.compiler.reset()  # compile afresh: an earlier benchmark in this process would make its shapes dynamic
    torch.manual_seed(s.seed)
    batch = synthetic_mlm_batch(s.batch_size, s.seq_length, s.vocab_size, s.mlm_rate, s.seed)
    ours, theirs = build_mlm_model(arch, s.vocab_size), hf_bert(arch, s.vocab_size, s.seq_length)
    if s.compile:
        ours = torch.compile(ours, fullgraph=True, mode=s.compile_mode)
        theirs = torch.compile(theirs, mode=s.compile_mode)
    precision = Precision.resolve(s.dtype, device, "benchmark.dtype")
    ours_label, hf_label = f"ours ({arch.name})", "transformers BertForMaskedLM"
    steps = {
        ours_label: TimedStep(ours, batch, precision, device, fused_adamw=s.fused_adamw),
        hf_label: TimedStep(theirs, {k: batch[k] for k in ("input_ids", "labels")}, precision, device,
                            fused_adamw=s.fused_adamw),
    }
    for name in s.variants:
        torch.manual_seed(s.seed)  # the default's initial weights
        steps[f"ours + {name}"] = variant_step(name, arch, s.vocab_size, batch, precision, device,
                                               s.compile_mode if s.compile else None, s.fused_adamw)
    times = {label: [] for label in steps}
    load_before = os.getloadavg()
    for i in range(s.warmup_steps):
        for label, step in steps.items():
            print(f"warm-up {i + 1}/{s.warmup_steps} {label}: {step.step():.3f} s", flush=True)
    after_warmup = compile_counts()
    for i in range(s.steps):
        for label, step in steps.items():  # interleaved, so drifting machine load hits both alike
            times[label].append(step.step())
            print(f"step {i + 1}/{s.steps} {label}: {times[label][-1]:.3f} s", flush=True)
    compiles = None
    if s.compile:  # every shape is static (k masked tokens per row), so nothing may compile after warm-up
        compiles = {**after_warmup, "recompiles_after_warmup": compile_counts()["graphs_compiled"]
                    - after_warmup["graphs_compiled"]}
        print(f"torch.compile: {compiles}", flush=True)
    operators = top_operators(next(iter(steps.values())).step, device) if s.profile else None
    # a compiled graph's kernels hide their operators from the CPU counter: count eager runs or on the GPU
    host_syncs = count_host_syncs(steps[ours_label].run, device) if device.type == "cuda" or not s.compile else None
    print(f"host syncs in one step of ours: {host_syncs if host_syncs is not None else 'not counted (compiled, CPU)'}",
          flush=True)
    # each step's own count: a variant's technique may run more (SAM's second pass)
    executed = {label: step.executed_flops() / (s.batch_size * s.seq_length) for label, step in steps.items()}

    shapes = model_gemm_shapes(arch, s.batch_size, s.seq_length, s.vocab_size, s.mlm_rate)
    measured_peak = measured_peak_tflops(shapes, s.dtype, device)
    print(f"measured matmul peak at the model's shapes: {measured_peak:.3f} TFLOP/s", flush=True)
    tokens_per_step = s.batch_size * s.seq_length
    flops = [training_flops_per_token(layout, s.vocab_size, s.seq_length, s.mlm_rate)
             for layout in (arch, bert_layout(arch))]
    summaries = {label: summarize(label, step, times[label], tokens_per_step, flops[label == hf_label],
                                  executed[label], peak_tflops, measured_peak)
                 for label, step in steps.items()}
    result = {
        "command": " ".join(shlex.quote(a) for a in ["python", "scripts/benchmark.py", *sys.argv[1:]]),
        "device": device_name,
        "peak": peak_note,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "settings": asdict(s),
        "arch": asdict(arch),
        "measured_peak_tflops": measured_peak,
        "compile": compiles,
        "host_syncs_per_step_ours": host_syncs,
        "top_operators_ours": operators,
        "ours": summaries[ours_label],
        "hf_bert": summaries[hf_label],
        "variants": {name: against_default(summaries[f"ours + {name}"], summaries[ours_label])
                     for name in s.variants},
    }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["hf_bert"]["tokens_per_s"]

    output_dir = Path(s.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    run = run_name(s, arch.name, device.type)
    (output_dir / f"{run}.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (output_dir / f"{run}.md").write_text(table)
    print("\n" + table)
    print(f"wrote {output_dir / run}.json and .md")
    return output_dir / f"{run}.json"
