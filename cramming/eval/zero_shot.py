"""The zero-shot stage: BLiMP and bits per character of any checkpoint, written to
zero_shot_results.{json,md}. No fine-tuning; reported apart from GLUE and never mixed into its average.

    results["blimp"]: overall (percent, the mean over the paradigms), fields, paradigms (UID -> percent), pairs,
                      method, rows, seconds, rows_per_s
    results["partial"]: while it runs (and where it was stopped), what is still missing; absent once complete
    results["bits"]:  bits_per_char, bits_per_token, characters, tokens, source (a text file or the run's
                      held-out rows), or null with results["bits_skipped"] saying why
"""

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Optional

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.data.store import PreparedDataset
from cramming.engine.device import prepare_device, resolve_device
from cramming.errors import CrammingError
from cramming.eval.bits import bits_per_character, held_out_pieces, text_file_pieces
from cramming.eval.blimp import PARADIGMS, blimp_result, blimp_texts, load_blimp, published, score_blimp
from cramming.eval.masked_lm import open_masked_lm
from cramming.eval.pll import DEFAULT_METHOD, check_method, count_rows, encode
from cramming.files import write_atomically
from cramming.phase_progress import PhaseProgress
from cramming.provenance import provenance

log = logging.getLogger(__name__)
DEFAULT_BITS_ROWS = 64


@dataclasses.dataclass
class ZeroShotConfig:
    """Top level of `scripts/zero_shot.py` (cramming-zero-shot)."""

    ckpt: str = MISSING  # a checkpoint dir, a run dir (its final or newest checkpoint), latest, or hf:<id or folder>
    blimp_dir: Optional[str] = None  # a folder of the 67 BLiMP .jsonl or .jsonl.gz files; null: the hub (nyu-mll/blimp)
    pairs_per_paradigm: Optional[int] = None  # the first N pairs of each paradigm; null: all 1,000
    method: str = DEFAULT_METHOD  # pll-word-l2r (Kauf & Ivanova 2023) | pll (Salazar et al. 2020)
    # bits per character of this UTF-8 text file; null: of the run's own held-out rows (our checkpoints whose
    # prepared dataset is in cache_dir), else none
    text_file: Optional[str] = None
    bits_rows: Optional[int] = None  # held-out rows scored for bits per character (text_file null only); null: 64
    batch_size: int = 256  # masked rows per forward pass
    device: str = "auto"  # auto | cpu | cuda | cuda:<index>
    runs_dir: str = "outputs"  # where `ckpt=latest` looks for the newest pretraining run
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"  # where the run's prepared dataset lives
    output_dir: str = "outputs/zero_shot/${now:%Y-%m-%d_%H-%M-%S}"  # zero_shot_results.{json,md} and the log


ConfigStore.instance().store(name="zero_shot_schema", node=ZeroShotConfig)


def check(cfg: ZeroShotConfig) -> None:
    """Settings that would fail late, now (before a model is loaded)."""
    check_method(cfg.method)
    for key in ("batch_size", "bits_rows"):
        if getattr(cfg, key) is not None and getattr(cfg, key) < 1:
            raise CrammingError(f"{key}={getattr(cfg, key)} must be at least 1")
    if cfg.text_file is not None and cfg.bits_rows is not None:
        raise CrammingError("bits_rows counts the run's held-out rows; with text_file the whole file is scored: "
                            "set one of them")
    if cfg.pairs_per_paradigm is not None and cfg.pairs_per_paradigm < 1:
        raise CrammingError(f"pairs_per_paradigm={cfg.pairs_per_paradigm} must be at least 1 (or unset: all)")


def run_zero_shot(cfg: ZeroShotConfig, checkpoint: str, output_dir: str | Path) -> dict:
    """Score `checkpoint` (our checkpoint directory or hf:...) on BLiMP and bits per character; write the reports.

    BLiMP is scored a paradigm at a time, and the reports are rewritten after each, marked partial (`partial`:
    what is still to come): an interrupted or killed run keeps every paradigm it finished."""
    check(cfg)
    device = resolve_device(cfg.device, "device")
    prepare_device(device)
    paradigms = load_blimp(cfg.blimp_dir, cfg.pairs_per_paradigm)  # the data first: a bad folder fails before the model
    if len(paradigms) != PARADIGMS:
        log.warning("BLiMP: %d paradigms found, not %d: blimp.overall is their mean only", len(paradigms), PARADIGMS)
    lm = open_masked_lm(checkpoint, device)
    texts, source, skipped = _bits_texts(cfg, lm)
    results = {
        "checkpoint": lm.description,
        "blimp": None,
        "published": {},  # the published rows over the paradigms scored, once they are
        "bits": None,
        "bits_skipped": skipped,
        "settings": {key: getattr(cfg, key) for key in ("blimp_dir", "pairs_per_paradigm", "method", "text_file",
                                                         "bits_rows", "batch_size")},
        "device": str(device),
        "provenance": provenance(device),
        "checkpoint_provenance": lm.provenance,
    }
    output_dir = Path(output_dir)

    def keep(blimp: dict, done: int) -> None:
        scored = {paradigm.uid: paradigm.field for paradigm in paradigms[:done]}
        later = "; bits per character not yet" if texts else ""
        results.update(blimp=blimp, published=published(scored),
                       partial=f"BLiMP: {done} of {len(paradigms)} paradigms scored{later}")
        write_reports(results, output_dir)

    try:
        results["blimp"] = timed_blimp(lm, paradigms, cfg.method, cfg.batch_size, keep)
        results["published"] = published({paradigm.uid: paradigm.field for paradigm in paradigms})
        if texts:
            results["partial"] = "bits per character not yet"
            write_reports(results, output_dir)
            with PhaseProgress("bits per character", count_rows(encode(lm.tokenizer, texts)), "masked rows",
                               log) as progress:
                bits = bits_per_character(lm, texts, cfg.method, cfg.batch_size, progress.advance)
            results["bits"] = {**bits, "source": source}
            log.info("%.4f bits per character, %.4f per token (%s)", bits["bits_per_char"], bits["bits_per_token"],
                     source)
    except KeyboardInterrupt:
        if results.get("partial"):
            log.warning("stopped: kept what was scored (%s) in %s/zero_shot_results.{json,md}", results["partial"],
                        output_dir)
        raise
    results.pop("partial", None)
    write_reports(results, output_dir)
    log.info("wrote %s/zero_shot_results.{json,md}", output_dir)
    return results


def timed_blimp(lm, paradigms, method: str, batch_size: int, after_paradigm=None) -> dict:
    """score_blimp a paradigm at a time, with its progress, and its wall time: seconds and rows_per_s (masked
    rows a second) added. after_paradigm(result so far, paradigms done), after each but the last."""
    started = time.perf_counter()
    total = count_rows(encode(lm.tokenizer, blimp_texts(paradigms)))
    by_paradigm, rows = {}, 0
    with PhaseProgress("BLiMP", total, "masked rows", log) as progress:
        for done, paradigm in enumerate(paradigms, 1):
            scored = score_blimp(lm, [paradigm], method, batch_size, progress.advance)
            by_paradigm[paradigm.uid], rows = scored["overall"], rows + scored["rows"]
            if after_paradigm is not None and done < len(paradigms):
                after_paradigm(_timed(blimp_result(paradigms, by_paradigm, method, rows), lm, started), done)
    blimp = _timed(blimp_result(paradigms, by_paradigm, method, rows), lm, started)
    log.info("BLiMP %.2f%% over %d paradigms, %d pairs (%s): %d masked rows in %.1f s, %.0f rows/s", blimp["overall"],
             len(blimp["paradigms"]), blimp["pairs"], method, blimp["rows"], blimp["seconds"], blimp["rows_per_s"])
    return blimp


def _timed(blimp: dict, lm, started: float) -> dict:
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)
    seconds = time.perf_counter() - started
    return {**blimp, "seconds": round(seconds, 3), "rows_per_s": round(blimp["rows"] / seconds, 1)}


def time_blimp(checkpoint: str, blimp_dir: str | None, device: str = "auto", pairs_per_paradigm: int | None = None,
               method: str = DEFAULT_METHOD, batch_size: int = 256) -> dict:
    """The BLiMP result of a checkpoint (ours or hf:...) with its time (seconds, rows_per_s), and nothing written:
    for a benchmark such as the GPU check (the whole of BLiMP with pairs_per_paradigm=None)."""
    check_method(method)
    resolved = resolve_device(device, "device")
    prepare_device(resolved)
    paradigms = load_blimp(blimp_dir, pairs_per_paradigm)
    return timed_blimp(open_masked_lm(checkpoint, resolved), paradigms, method, batch_size)


def _bits_texts(cfg: ZeroShotConfig, lm) -> tuple[list[str], str | None, str | None]:
    """(texts, where they come from, why there are none)."""
    if cfg.text_file is not None:
        return text_file_pieces(cfg.text_file), cfg.text_file, None
    dataset_name = (lm.provenance or {}).get("dataset")
    if dataset_name is None:
        return [], None, "no text_file, and the checkpoint names no prepared dataset"
    folder = Path(cfg.cache_dir).expanduser() / "data" / dataset_name
    if not folder.is_dir():
        return [], None, f"no text_file, and the run's dataset {dataset_name} is not in {folder.parent}"
    dataset = PreparedDataset.open(folder)
    if not dataset.held_out_rows:
        return [], None, f"no text_file, and the run's dataset {dataset_name} holds no rows out"
    rows = DEFAULT_BITS_ROWS if cfg.bits_rows is None else cfg.bits_rows
    texts = held_out_pieces(dataset, lm.tokenizer, rows)
    return texts, f"{min(rows, dataset.held_out_rows)} held-out rows of {dataset_name}", None


def write_reports(results: dict, output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(output_dir / "zero_shot_results.json", json.dumps(results, indent=2, allow_nan=False) + "\n")
    write_atomically(output_dir / "zero_shot_results.md", markdown_report(results))


def markdown_report(results: dict) -> str:
    blimp = results["blimp"]
    paradigms = len(blimp["paradigms"])
    over = f"{paradigms} paradigm{'s' if paradigms != 1 else ''}, {blimp['pairs']:,} pairs"
    partial = [f"**Partial, stopped before the end**: {results['partial']}.", ""] if results.get("partial") else []
    lines = ["# Zero-shot results", "", *partial, f"Checkpoint: `{results['checkpoint']}`", "",
             f"## BLiMP ({blimp['method']}; {over}; not part of any GLUE score)", "",
             "| model | overall | " + " | ".join(blimp["fields"]) + " |",
             "|---|---|" + "---|" * len(blimp["fields"]),
             f"| **this checkpoint** | {blimp['overall']:.1f} | "
             + " | ".join(f"{value:.1f}" for value in blimp["fields"].values()) + " |"]
    lines += [f"| {name} (published) | {row['overall']:.1f} | "
              + " | ".join(f"{row['fields'][field]:.1f}" for field in blimp["fields"]) + " |"
              for name, row in results["published"].items()]
    lines += ["", "Published rows: Warstadt et al. (2020), the mean over the same paradigms; models score a pair by "
              "their total log-probability, humans by agreement.", ""]
    bits = results["bits"]
    if bits is not None:
        lines += ["## Bits per character", "", f"{bits['bits_per_char']:.4f} bits per character, "
                  f"{bits['bits_per_token']:.4f} per token ({bits['characters']:,} characters, {bits['tokens']:,} "
                  f"tokens of {bits['source']}; {bits['method']})", ""]
    else:
        lines += ["## Bits per character", "", f"not measured: {results['bits_skipped']}", ""]
    lines += ["## Paradigms", "", "| paradigm | percent |", "|---|---|"]
    lines += [f"| {uid} | {value:.1f} |" for uid, value in blimp["paradigms"].items()]
    lines += ["", f"BLiMP: {blimp['rows']:,} masked rows in {blimp['seconds']:.1f} s "
              f"({blimp['rows_per_s']:,.0f} rows/s) on {results['device']}", ""]
    return "\n".join(lines)
