"""Many runs in one process (a sweep, `pretrain.py -m`, the GPU check's bench then cram), each compiled afresh.

torch.compile's dynamo caches compiled graphs per function, across runs: after `recompile_limit` (8) graphs
of the model's forward it silently runs the rest eagerly, and a benchmark compiled at one shape makes the
next one's shapes dynamic. Every run and every benchmark resets it first.

The compile backend here records the graphs dynamo hands it and runs them as traced: inductor's code
generation takes minutes on a 2-core CPU, and it plays no part in this. Dynamo itself (tracing, guards, its
caches, the recompile limit, automatic dynamic shapes) runs as it does in front of inductor."""

import functools

import pytest
import torch

from cramming import compose_config as compose_command
from cramming.bench.benchmark import run_benchmark
from cramming.pretraining import pretrain
from tests.train.runs import TINY_RUN, compose_config, summary

SHAPES = [(layers, heads) for heads in (1, 2, 4, 8, 16) for layers in (1, 2)]  # 10 models: 10 graphs of forward


def is_dynamic(graph: torch.fx.GraphModule) -> bool:
    """Whether a graph was traced with symbolic sizes (automatic dynamic shapes) rather than static ones."""
    values = [node.meta.get("example_value") for node in graph.graph.find_nodes(op="placeholder")]
    return any(isinstance(value, torch.SymInt) or (isinstance(value, torch.Tensor) and
                                                   any(isinstance(size, torch.SymInt) for size in value.shape))
               for value in values)


@pytest.fixture
def compiled_graphs(monkeypatch) -> list[bool]:
    """torch.compile with the recording backend; returns, for each graph compiled, whether it is dynamic."""
    graphs = []

    def record(graph, example_inputs):
        graphs.append(is_dynamic(graph))
        return graph.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=record))
    return graphs


@pytest.mark.slow
def test_ten_compiled_runs_in_one_process_are_each_compiled(compiled_graphs, shared_cache, tmp_path, simulated_clock):
    """Ten models in one process, as in a sweep: each run compiles its own static graph. Without the reset at
    each run's start the ninth and tenth would run eagerly (dynamo's recompile limit spent on the first
    eight). On the simulated clock the budget buys each run the same two steps."""
    budget_hours = 2 * simulated_clock / 3600 * 0.9  # two microbatches of simulated time, and no third
    steps = []
    for number, (layers, heads) in enumerate(SHAPES):
        before = len(compiled_graphs)
        run_dir = pretrain(compose_config(TINY_RUN + [
            "impl.compile=true", f"arch.num_layers={layers}", f"arch.num_heads={heads}", "impl.microbatch_size=4",
            "train.batch_size=4", f"budget={budget_hours}", "data.validation_rows=0",
            f"output_dir={tmp_path / str(number)}"]))
        assert compiled_graphs[before:] == [False], f"run {number + 1} ({layers} layers, {heads} heads)"
        facts = summary(run_dir)
        assert facts["stop_reason"] == "budget"
        steps.append(facts["steps"])
    assert steps == [2] * len(SHAPES)


@pytest.mark.slow
def test_a_benchmark_after_another_compiles_static_shapes(compiled_graphs, tmp_path):
    """The second benchmark, at another batch size, compiles static graphs of its own: without the reset
    dynamo took the new batch size for a dynamic dimension and traced both models with symbolic sizes."""
    for batch_size in (2, 3):
        settings = ["arch=crammed-bert-tiny", "benchmark.device=cpu", "benchmark.compile=true",
                    f"benchmark.batch_size={batch_size}", "benchmark.steps=1", "benchmark.warmup_steps=1",
                    "benchmark.vocab_size=512", f"benchmark.output_dir={tmp_path}"]
        before = len(compiled_graphs)
        run_benchmark(compose_command("benchmark", settings))
        assert compiled_graphs[before:] and not any(compiled_graphs[before:]), f"batch size {batch_size}"


def test_the_calculators_compiled_fit_compiles_each_shape_statically(compiled_graphs, tmp_path, capsys):
    """fit=true compiles every shape of its grid (on a GPU, as training does), each afresh: the second batch
    size of a model was traced with a dynamic batch dimension without the reset (and a ninth model ran eagerly)."""
    from cramming.calculator.config import CalculatorConfig, FitGrid
    from cramming.calculator.measure import fit_speed
    from cramming.engine.hardware import known_profiles

    grid = FitGrid(depths=[1, 2], widths=[32], batches=[2, 3], compile=True, steps=1)
    cfg = CalculatorConfig(gpu=known_profiles()["cpu"], fit_grid=grid, vocab_size=128, seq_length=32,
                           cache_dir=str(tmp_path))
    fit_speed(cfg, cfg.gpu)
    shapes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fit: ") and " x " in line]
    assert len(shapes) == 4 and compiled_graphs == [False] * 4  # one static graph of each shape
