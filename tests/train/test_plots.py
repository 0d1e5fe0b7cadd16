"""The plots of a GPU run (MFU and NVML telemetry present), drawn from a metrics.jsonl written here."""

import json
from types import SimpleNamespace

from matplotlib.image import imread

from cramming.train import plots
from cramming.train.plots import REDRAW_EVERY_S, PlotRefresh, plot_run
from cramming.train.stopping import BudgetClock


def test_a_gpu_runs_plots_include_mfu_and_the_gpu_panels(tmp_path):
    run_dir = tmp_path / "gpu-run" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True)
    records = [{"step": step, "elapsed": 600.0 * step, "tokens": 10**6 * step, "loss": 9.0 - step / 10,
                "lr": 1e-3, "batch_size": 128 * step, "tokens_per_s": 1667.0, "mfu": 0.4 if step > 1 else None,
                "gpu_util": 95.0, "gpu_mem_gb": 40.0, "gpu_temp_c": 70.0, "gpu_power_w": 250.0, "energy_wh": step}
               for step in range(1, 30)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    sizes = {path.stem: imread(path).shape[:2] for path in plot_run(run_dir)}
    # (height, width): two panels a row; the four GPU figures in two rows
    assert sizes == {"loss": (400, 1100), "schedules": (400, 1100), "throughput": (400, 1100),
                     "hardware": (800, 1100)}


def test_plots_are_redrawn_after_a_new_checkpoint_at_most_every_five_minutes_from_the_start(monkeypatch):
    """A redraw takes about a second: none in a run's first REDRAW_EVERY_S (its end draws its own), then
    at the first new checkpoint each REDRAW_EVERY_S."""
    now, drawn, newest = [1000.0], [], ["step-1"]
    monkeypatch.setattr(plots.time, "perf_counter", lambda: now[0])

    def draw(run_dir) -> None:  # a second a redraw
        drawn.append(run_dir)
        now[0] += 1.0

    monkeypatch.setattr(plots, "plot_run", draw)
    refresh = PlotRefresh(lambda: newest[0])
    clock = BudgetClock(600.0)
    state = SimpleNamespace(run_dir="run", clock=clock)
    for seconds, checkpoint, draws in [(1, "step-2", 0), (REDRAW_EVERY_S - 2, "step-3", 0),  # too soon
                                       (REDRAW_EVERY_S, "step-3", 1),  # a checkpoint not drawn yet
                                       (REDRAW_EVERY_S + 5, "step-4", 1),  # too soon after that draw
                                       (2 * REDRAW_EVERY_S + 1, "step-4", 2),  # the first draw took a second
                                       (3 * REDRAW_EVERY_S, "step-4", 2)]:  # no checkpoint since that draw
        now[0], newest[0] = 1000.0 + seconds, checkpoint
        refresh.after_step(state)
        assert len(drawn) == draws, (seconds, checkpoint)
    assert drawn == ["run", "run"]
    assert clock.aside_seconds == 2.0  # the redraws' seconds, counted apart from training (tokens/s leave them out)


def test_token_labels_do_not_run_together_and_a_one_record_run_is_drawn():
    """The quick start's token counts (up to a million) were printed in full and ran into each other; a run
    with a single record was an invisible line of one point in the ablation overlay."""
    from cramming.train.plots import comparison_figure

    long_run = [{"elapsed": 7.2 * step, "tokens": 90_000 * step, "loss": 9.0 - step / 10} for step in range(1, 11)]
    short_run = [{"elapsed": 7.0, "tokens": 400_000, "loss": 8.5}]
    figure = comparison_figure([("long", long_run), ("one record", short_run)])
    figure.canvas.draw()
    by_time, by_tokens = figure.axes
    labels = [label for label in by_tokens.get_xticklabels() if label.get_text()]
    assert any(label.get_text() == "400k" for label in labels)
    boxes = [label.get_window_extent() for label in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    for axes in (by_time, by_tokens):
        (_, single) = axes.get_lines()
        assert len(single.get_xdata()) == 1 and single.get_marker() == "o"


def test_a_fraction_is_drawn_on_its_whole_range():
    """A run clipping every step drew "fraction of steps clipped" as a flat line on an axis of 0.96-1.04."""
    from cramming.train.plots import panels_figure

    figure = panels_figure([([1, 2, 3], "training time (s)", [1.0, 1.0, 1.0], "fraction of steps clipped"),
                            ([1, 2, 3], "training time (s)", [2.0, 2.0, 2.0], "gradient norm (before clipping)")], "t")
    clipped, norm = figure.axes
    assert clipped.get_ylim() == (-0.05, 1.05) and norm.get_ylim() != (-0.05, 1.05)


def test_the_zero_shot_curves_are_drawn_against_tokens_and_time_beside_the_published_5_gram_and_lstm(tmp_path):
    run_dir = tmp_path / "cpu-run" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True)
    records = [{"step": step, "elapsed": 6.0 * step, "tokens": 4096 * step, "loss": 9.0 - step / 10, "lr": 1e-3,
                "batch_size": 32, "tokens_per_s": 700.0, "mfu": None,
                **({"blimp": 50.0 + step / 4, "bits_per_char": 3.0 - step / 40} if step % 10 == 0 else {})}
               for step in range(1, 41)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    sizes = {path.stem: imread(path).shape[:2] for path in plot_run(run_dir)}
    assert sizes["zero_shot"] == (800, 1100)  # BLiMP and bits per character, each against tokens and time
    figure = plots.comparison_figure([("a", records), ("b", records[:20])])
    assert len(figure.axes) == 6  # loss, BLiMP, bits per character; against time and tokens
    for axes in figure.axes[2:4]:
        labels = [line.get_label() for line in axes.get_lines()]
        assert labels == ["a", "b", "chance (50%)", "5-gram (published)", "LSTM (published)"]
        assert [line.get_ydata()[0] for line in axes.get_lines()[2:]] == [50.0, 61.2, 69.8]
    assert [line.get_label() for line in figure.axes[4].get_lines()] == ["a", "b"]


def drawn(monkeypatch) -> dict:
    """The panels plot_run hands each figure, by its file's stem."""
    panels, save = {}, plots._save

    def keep(given, path, title):
        panels[path.stem] = given
        return save(given, path, title)

    monkeypatch.setattr(plots, "_save", keep)
    return panels


def test_a_run_validated_once_draws_its_two_values_beside_chance_not_four_dots(tmp_path, monkeypatch):
    """A run with only its end validation drew four panels of one dot each, with no chance line."""
    run_dir = tmp_path / "cpu-run" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True)
    records = [{"step": step, "elapsed": 3.0 * step, "tokens": 4096 * step, "loss": 9.0, "lr": 1e-3,
                "batch_size": 32, "tokens_per_s": 700.0, **({"blimp": 52.09, "bits_per_char": 3.1777} if step == 3
                                                            else {})} for step in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    panels = drawn(monkeypatch)
    sizes = {path.stem: imread(path).shape[:2] for path in plot_run(run_dir)}
    assert sizes["zero_shot"] == (400, 1100)  # BLiMP and bits per character against tokens: one row
    blimp, bits = plots.panels_figure(panels["zero_shot"], "t").axes
    assert [text.get_text() for text in blimp.texts + bits.texts] == ["52.09", "3.178"]
    assert {line.get_label(): line.get_ydata()[0] for line in blimp.get_lines()[1:]} == plots.BLIMP_LINES
    assert blimp.get_lines()[0].get_marker() == "o"


def test_the_gradient_plot_draws_the_runs_clip_threshold(tmp_path, monkeypatch):
    """A run clipping every step said nothing of the threshold it clipped at (the config's, a resume's last)."""
    from omegaconf import OmegaConf

    from cramming.train.runs import record_config

    run_dir = tmp_path / "run" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True)
    records = [{"step": step, "elapsed": 3.0 * step, "tokens": 4096 * step, "loss": 9.0, "lr": 1e-3,
                "batch_size": 32, "tokens_per_s": 700.0, "grad_norm": 1.6, "clipped_fraction": 1.0}
               for step in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    panels = drawn(monkeypatch)
    for clip in (1.0, 0.25):  # the run, then a resume that changed it
        record_config(run_dir, OmegaConf.create({"train": {"optim": {"grad_clip": clip}}}))
    plot_run(run_dir)
    norm, clipped = plots.panels_figure(panels["gradients"], "t").axes
    (threshold,) = norm.get_lines()[1:]
    assert threshold.get_label() == "clip threshold (train.optim.grad_clip=0.25)" and threshold.get_ydata()[0] == 0.25
    assert clipped.get_ylabel() == "fraction of steps clipped (norm above 0.25)"
    panels.clear()
    record_config(run_dir, OmegaConf.create({"train": {"optim": {"grad_clip": None}}}))
    plot_run(run_dir)
    ((*_, label),) = panels["gradients"]
    assert label == "gradient norm (train.optim.grad_clip=null: never clipped)"


def test_the_published_lines_are_the_published_means_over_all_67_paradigms():
    from cramming.eval.blimp import PACKAGED, published

    uids = [json.loads(line)["UID"] for line in (PACKAGED / "models_summary.jsonl").read_text().splitlines()]
    means = published({uid: "syntax" for uid in uids if uid != "overall"})
    assert len([uid for uid in uids if uid != "overall"]) == 67
    assert plots.PUBLISHED_BLIMP == {"5-gram": round(means["5-gram"]["overall"], 1),
                                     "LSTM": round(means["LSTM"]["overall"], 1)}
