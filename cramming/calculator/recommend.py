"""The calculator end to end: speed model, size rule and loss fit, then every candidate shape ranked,
printed and written as markdown, JSON and a plot."""

from dataclasses import asdict
from pathlib import Path

from cramming.calculator import report
from cramming.calculator.candidates import evaluate, rank, shapes
from cramming.calculator.config import CalculatorConfig, check_config
from cramming.calculator.loss_model import (SizeRule, check_same_data, expand_runs, fit_frontier, leave_one_out,
                                            read_run)
from cramming.calculator.measure import BASE, check, check_run, fit_speed, read_run_speed
from cramming.calculator.speed_model import non_embedding_parameters, resolve_speed_model
from cramming.errors import CrammingError
from cramming.engine.hardware import known_profiles, resolve_auto
from cramming.model import training_flops_per_token


def size_rule(cfg: CalculatorConfig, profiles: dict) -> SizeRule:
    """crammed-bert is compute-optimal for anchor.hours on anchor.gpu (compute from that profile's speed)."""
    if cfg.anchor.gpu not in profiles:
        raise CrammingError(f"anchor.gpu={cfg.anchor.gpu!r} is not a profile ({', '.join(profiles)})")
    anchor = profiles[cfg.anchor.gpu]
    speed = resolve_speed_model(anchor, profiles, cfg.cache_dir)
    tokens = speed.tokens_per_second(BASE, anchor.microbatch_size, cfg.vocab_size, cfg.seq_length,
                                     cfg.mlm_rate) * cfg.anchor.hours * 3600
    flops = tokens * training_flops_per_token(BASE, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate)
    return SizeRule(params=non_embedding_parameters(BASE), compute=flops)


def loss_fit(cfg: CalculatorConfig):
    """The frontier from the user's runs and each run's leave-one-out error, or None without runs."""
    paths = expand_runs(cfg.runs)
    if not paths:
        return None, [], [], (f"no runs given (runs=...), so no absolute loss; ranked by the size rule "
                              f"with the frontier exponent loss_exponent={cfg.loss_exponent}")
    runs = [read_run(path) for path in paths]
    check_same_data(runs)
    frontier = fit_frontier([r.compute for r in runs], [r.final_loss for r in runs])
    source = (f"fitted on {len(runs)} runs: L = {frontier.a:.3g}·(C/{frontier.c0:.3g})^-{frontier.alpha:.3g}"
              f" + {frontier.c:.3g}, with the size rule for shapes off the frontier")
    print(f"loss fit: {source}")
    held_out = []
    if len(runs) >= 4:
        print("| held-out run | final loss | predicted from the others | error |\n|---|---|---|---|")
        for name, actual, predicted in leave_one_out(runs):
            print(f"| {name} | {actual:.3f} | {predicted:.3f} | {predicted - actual:+.3f} |")
            held_out.append({"run": name, "final_loss": actual, "predicted": predicted})
        worst = max(abs(h["predicted"] - h["final_loss"]) for h in held_out)
        print(f"loss fit: largest held-out error {worst:.3f}")
    return frontier, runs, held_out, source


def recommend(cfg: CalculatorConfig) -> Path:
    """Rank the candidate shapes for cfg.budget on cfg.gpu; write <output_dir>/<gpu>-<budget>h.{md,json,png}."""
    check_config(cfg)
    profiles = known_profiles()
    profile = resolve_auto(cfg.gpu, profiles)
    run = read_run_speed(cfg.check_run, profile) if cfg.check_run is not None else None
    speed = fit_speed(cfg, profile) if cfg.fit else resolve_speed_model(profile, profiles, cfg.cache_dir)
    rule = size_rule(cfg, profiles)
    frontier, runs, held_out, loss_source = loss_fit(cfg)
    batch = cfg.microbatch_size or profile.microbatch_size
    seconds = cfg.budget * 3600
    archs = shapes(BASE, cfg.candidates.depths, cfg.candidates.widths, cfg.candidates.head_size,
                   cfg.candidates.ffn_ratio)
    candidates = rank([evaluate(arch, speed, seconds, batch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate,
                                rule, frontier, cfg.loss_exponent) for arch in archs])
    result = {
        "budget_hours": cfg.budget, "gpu": profile.name, "microbatch_size": batch,
        "seq_length": cfg.seq_length, "vocab_size": cfg.vocab_size, "mlm_rate": cfg.mlm_rate,
        "speed": {"source": speed.source, "fit_error": speed.fit_error, "constants": asdict(speed.constants)},
        "size_rule": asdict(rule), "loss_source": loss_source,
        "frontier": asdict(frontier) if frontier else None, "held_out": held_out,
        "candidates": [asdict(c) for c in candidates],
    }
    output_dir = Path(cfg.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{profile.name}-{cfg.budget:g}h"
    table = report.markdown(result, cfg.rows)
    print("\n" + table)
    if cfg.check:
        result["check"] = check(cfg, profile, candidates[0], batch)
    if run is not None:
        result["check_run"] = check_run(run, speed)
    report.write_json(output_dir / f"{stem}.json", result)
    (output_dir / f"{stem}.md").write_text(table)
    report.plot(output_dir / f"{stem}.png", result, frontier, rule, runs,
                frontier.alpha if frontier else cfg.loss_exponent)
    print(f"wrote {output_dir / stem}.json, .md and .png")
    print(f"next: {report.train_command(result)}")
    return output_dir / f"{stem}.json"
