"""PNG plots of a run from its metrics.jsonl, and an overlay of several runs for ablations.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no display, no global state), so it
works on a headless machine and from any thread.
"""

import textwrap
import time
from pathlib import Path
from typing import Callable

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from cramming.errors import CrammingError
from cramming.train.callbacks import Callback, TrainState
from cramming.train.runs import LossBasis, loss_basis, read_records, run_config

PLOTS_DIR = "plots"
# Redrawing the plots takes about a second: at most this often while training (the end of the run draws its own).
REDRAW_EVERY_S = 300
# The published BLiMP means over all 67 paradigms (Warstadt et al., 2020: models_summary.jsonl, which
# cramming.eval.blimp reads; a test holds these to it), drawn as lines on every BLiMP panel.
PUBLISHED_BLIMP = {"5-gram": 61.2, "LSTM": 69.8}
# Across every BLiMP panel: chance (of a pair's two sentences, one is right) under the published means.
BLIMP_LINES = {"chance (50%)": 50.0, **{f"{name} (published)": value for name, value in PUBLISHED_BLIMP.items()}}
BLIMP_LABEL, BITS_LABEL = "BLiMP subset (% of pairs right)", "held-out bits per character"
# Hardware panels, drawn where the run logged them: (key, axis label).
HARDWARE = [("gpu_util", "GPU utilization (%)"), ("gpu_mem_gb", "GPU memory used (GiB)"),
            ("gpu_temp_c", "GPU temperature (°C)"), ("gpu_power_w", "GPU power (W)"),
            ("cpu_util", "CPU utilization (% of a core)"), ("rss_gb", "process memory (GiB)")]


def _time_unit(seconds: float) -> tuple[float, str]:
    """Seconds, minutes or hours, whichever keeps the axis readable for a run this long."""
    return (3600, "h") if seconds > 7200 else (60, "min") if seconds > 120 else (1, "s")


def _time_axis(records: list[dict]) -> tuple[list[float], str]:
    scale, unit = _time_unit(records[-1]["elapsed"])
    return [r["elapsed"] / scale for r in records], f"training time ({unit})"


def _label_x(axes: Axes, x_label: str) -> None:
    """The x label; token counts as 200k, 1.5M, 2G (full numbers up to a million ran into each other)."""
    axes.set_xlabel(x_label)
    if x_label == "tokens":
        axes.xaxis.set_major_formatter(EngFormatter(sep=""))


def _marker(points: int, of: int) -> str | None:
    """A marker where a line alone would not show: a series of a point or two, or a sparse one (the
    validation curve's few points)."""
    return "o" if points <= 2 or points < of / 2 else None


def _series(axes: Axes, points: list[tuple[float, float]], label: str | None, of: int) -> None:
    """One series of (x, y) points; a single point (a run validated only at its end) is a marker with its
    value written beside it, as a dot alone on an axis says nothing."""
    axes.plot([x for x, _ in points], [y for _, y in points], linewidth=1.2, label=label,
              marker=_marker(len(points), of))
    if len(points) == 1:
        axes.annotate(f"{points[0][1]:.4g}", points[0], textcoords="offset points", xytext=(6, 6), fontsize=9)


# Margins around and between panels, in inches: room for tick labels, axis labels and the title. Fixed margins
# draw a figure in about half the time matplotlib's constrained layout takes to compute them.
MARGIN_IN = {"left": 0.85, "right": 0.15, "bottom": 0.55, "top": 0.45,
             "between_columns": 0.95, "between_rows": 0.75}


def _figure(columns: int, rows: int) -> Figure:
    """A figure of rows x columns panels, 5.5 x 4 inches each, on the Agg canvas."""
    width, height = 5.5 * columns, 4 * rows
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    margins_across = MARGIN_IN["left"] + MARGIN_IN["right"] + (columns - 1) * MARGIN_IN["between_columns"]
    margins_down = MARGIN_IN["bottom"] + MARGIN_IN["top"] + (rows - 1) * MARGIN_IN["between_rows"]
    panel_width, panel_height = (width - margins_across) / columns, (height - margins_down) / rows
    figure.subplots_adjust(left=MARGIN_IN["left"] / width, right=1 - MARGIN_IN["right"] / width,
                           bottom=MARGIN_IN["bottom"] / height, top=1 - MARGIN_IN["top"] / height,
                           wspace=MARGIN_IN["between_columns"] / panel_width,  # fractions of a panel's size
                           hspace=MARGIN_IN["between_rows"] / panel_height)
    return figure


def _save(panels: list[tuple], path: Path, title: str) -> Path:
    panels_figure(panels, title).savefig(path, dpi=100)
    return path


def panels_figure(panels: list[tuple], title: str) -> Figure:
    """One figure of panels, two to a row, each (x, x label, y, y label) or (x, x label, y, y label, lines); y is
    one series or a dict of labelled series (a legend is drawn); None values are skipped; lines: {label: y} drawn
    across the panel (chance, published references, a threshold); a fraction (its label says so) is drawn on its
    whole range, 0 to 1."""
    columns, rows = min(len(panels), 2), (len(panels) + 1) // 2
    figure = _figure(columns, rows)
    grid = figure.subplots(rows, columns, squeeze=False).flatten()
    for axes in grid[len(panels):]:
        axes.set_visible(False)
    for axes, (x, x_label, y, y_label, *lines) in zip(grid, panels):
        for label, series in (y.items() if isinstance(y, dict) else [(None, y)]):
            _series(axes, [(a, b) for a, b in zip(x, series) if b is not None], label, len(x))
        _reference_lines(axes, lines[0] if lines else {})
        if isinstance(y, dict) or lines:
            axes.legend(fontsize=8)
        _label_x(axes, x_label)
        axes.set_ylabel(y_label)
        if y_label.startswith("fraction"):  # the whole 0-1 range: a run clipping every step is a line at 1, not
            axes.set_ylim(-0.05, 1.05)      # a flat line on an axis of 0.96-1.04
        axes.grid(alpha=0.3)
    figure.suptitle(title)
    return figure


def _reference_lines(axes: Axes, lines: dict[str, float]) -> None:
    for (label, value), style in zip(lines.items(), ("-", "--", ":", "-.")):
        axes.axhline(value, color="grey", linestyle=style, linewidth=1.0, label=label)


def _gradient_panels(run_dir: Path, time: list, time_label: str, norms: list, clipped: list) -> list[tuple]:
    """The gradient norm with the clip threshold across it (train.optim.grad_clip, from the run's config.yaml:
    a run that clips every step shows why), and the fraction of steps clipped where it was measured."""
    try:
        clip = run_config(run_dir).train.optim.grad_clip
    except (CrammingError, AttributeError):  # metrics without the config of a run: no threshold to draw
        return [(time, time_label, norms, "gradient norm (before clipping)")]
    if clip is None:
        return [(time, time_label, norms, "gradient norm (train.optim.grad_clip=null: never clipped)")]
    panels = [(time, time_label, norms, "gradient norm (before clipping)",
               {f"clip threshold (train.optim.grad_clip={clip:g})": clip})]
    if any(value is not None for value in clipped):
        panels.append((time, time_label, clipped, f"fraction of steps clipped (norm above {clip:g})"))
    return panels


def plot_run(run_dir: Path) -> list[Path]:
    """loss.png (with the validation curve), schedules.png, gradients.png, zero_shot.png (BLiMP and bits per
    character, where measured), throughput.png and hardware.png (where telemetry was logged) under plots/."""
    records = read_records(run_dir / "metrics.jsonl")
    if not records:
        return []
    out = run_dir / PLOTS_DIR
    out.mkdir(exist_ok=True)
    time, time_label = _time_axis(records)
    tokens = [r["tokens"] for r in records]

    def column(key: str) -> list:
        return [r.get(key) for r in records]

    title = f"{run_dir.parent.name}/{run_dir.name}"
    validated = any("val_loss" in record for record in records)
    losses = {"training": column("loss"), "validation": column("val_loss")} if validated else column("loss")
    written = [
        _save([(time, time_label, losses, "MLM loss"), (tokens, "tokens", losses, "MLM loss")], out / "loss.png",
              title),
        _save([(time, time_label, column("lr"), "learning rate"),
               (time, time_label, column("batch_size"), "batch size (sequences)")], out / "schedules.png", title),
    ]
    if any(value is not None for value in column("grad_norm")):
        written.append(_save(_gradient_panels(run_dir, time, time_label, column("grad_norm"),
                                              column("clipped_fraction")), out / "gradients.png", title))
    probed = sum(value is not None for value in column("blimp"))  # the zero-shot probe (cramming.eval.probe)
    if probed:
        zero_shot = [(tokens, "tokens", column("blimp"), BLIMP_LABEL, BLIMP_LINES),
                     (time, time_label, column("blimp"), BLIMP_LABEL, BLIMP_LINES),
                     (tokens, "tokens", column("bits_per_char"), BITS_LABEL),
                     (time, time_label, column("bits_per_char"), BITS_LABEL)]
        # one measurement (the end's alone): its two values against tokens, not the same dot four times
        written.append(_save(zero_shot[::2] if probed == 1 else zero_shot, out / "zero_shot.png", title))
    throughput = [(time, time_label, column("tokens_per_s"), "tokens/s")]
    if any(value is not None for value in column("mfu")):
        throughput.append((time, time_label, [m * 100 if m is not None else None for m in column("mfu")], "MFU (%)"))
    written.append(_save(throughput, out / "throughput.png", title))
    hardware = [(time, time_label, column(key), label) for key, label in HARDWARE
                if any(value is not None for value in column(key))]
    if hardware:
        written.append(_save(hardware, out / "hardware.png", title))
    return written


def plot_comparison(run_dirs: list[Path], path: Path, labels: list[str] | None = None) -> Path:
    """Overlay the curves of several runs against training time and against tokens (comparison_figure); each is
    labelled <name>/<timestamp> unless `labels` are given."""
    labels = labels or [f"{run_dir.parent.name}/{run_dir.name}" for run_dir in run_dirs]
    runs = []
    for label, run_dir in zip(labels, run_dirs):
        records = read_records(run_dir / "metrics.jsonl")
        if not records:
            raise CrammingError(f"{run_dir}: no metrics.jsonl records; is it a pretraining run directory?")
        runs.append((label, records))
    path.parent.mkdir(parents=True, exist_ok=True)
    note = loss_note(list(zip(labels, map(loss_basis, run_dirs))), detail=False)
    comparison_figure(runs, note).savefig(path, dpi=100)
    return path


def loss_note(bases: list[tuple[str, LossBasis | None]], detail: bool = True) -> str | None:
    """Why the MLM losses of these runs ((label, LossBasis) each) do not compare, or None where they do (a run
    whose basis is unknown is left out); with `detail`, which runs have which tokenizer and mask rate (the
    commands' line), else only what differs (a plot's title)."""
    known = [(label, basis) for label, basis in bases if basis is not None]
    groups = {}
    for label, basis in known:
        groups.setdefault((basis.tokenizer, basis.tokenizer_id), []).append(label)
    reasons = []
    if len(groups) > 1:
        reasons.append("other tokenizers" + detail * (" (" + "; ".join(
            f"{said} [{identity[:8] if len(identity) == 64 else 'by its config'}]: {', '.join(labels)}"
            for (said, identity), labels in groups.items()) + ")"))
    rates = {}
    for label, basis in known:
        rates.setdefault(basis.mlm_rate, []).append(label)
    if len(rates) > 1:
        reasons.append("other mask rates" + detail * (" (" + "; ".join(
            f"{rate:.0%}: {', '.join(labels)}" for rate, labels in rates.items()) + ")"))
    if not reasons:
        return None
    return f"the MLM losses do not compare: {' and '.join(reasons)}; bits per character does"


def comparison_figure(runs: list[tuple[str, list[dict]]], note: str | None = None) -> Figure:
    """The overlay of (label, records) runs against training time and against tokens: where the runs measured
    them (the zero-shot probe), bits per character first, the measure that compares across tokenizers and mask
    rates, and BLiMP beside chance and the published 5-gram and LSTM; then the MLM loss, under `note` where it
    does not compare (loss_note)."""
    scale, unit = _time_unit(max(records[-1]["elapsed"] for _, records in runs))
    axes_x = [(f"training time ({unit})", lambda r: r["elapsed"] / scale), ("tokens", lambda r: r["tokens"])]
    rows = [("loss", "MLM loss", {})]
    if any(r.get("blimp") is not None for _, records in runs for r in records):
        rows = [("bits_per_char", BITS_LABEL, {}), ("blimp", BLIMP_LABEL, BLIMP_LINES), *rows]
    figure = _figure(columns=2, rows=len(rows))
    grid = figure.subplots(len(rows), 2, squeeze=False)
    for row, (key, y_label, lines) in zip(grid, rows):
        for axes, (x_label, x_of) in zip(row, axes_x):
            for label, records in runs:
                _series(axes, [(x_of(r), r[key]) for r in records if r.get(key) is not None], label, len(records))
            _reference_lines(axes, lines)
            _label_x(axes, x_label)
            axes.set_ylabel(y_label)
            axes.grid(alpha=0.3)
            axes.legend(fontsize=8)
            if key == "loss" and note:
                axes.set_title(textwrap.fill(note, 75), fontsize=8, color="tab:red")
    figure.suptitle(f"{len(runs)} runs")
    return figure


class PlotRefresh(Callback):
    """Rank 0 redraws the run's plots after a step checkpoint is written, at most every REDRAW_EVERY_S and
    the first time REDRAW_EVERY_S into the run (a run's end draws its own), so a run that crashes has plots
    up to about the checkpoint it resumes from. `newest`: the newest checkpoint written."""

    name = "plot_refresh"

    def __init__(self, newest: Callable[[], Path | None]):
        self.newest, self.drawn_for = newest, newest()
        self.drawn_at = time.perf_counter()

    def after_step(self, state: TrainState) -> None:
        newest = self.newest()
        if newest != self.drawn_for and time.perf_counter() - self.drawn_at >= REDRAW_EVERY_S:
            with state.clock.aside():
                plot_run(state.run_dir)
            self.drawn_for, self.drawn_at = newest, time.perf_counter()
