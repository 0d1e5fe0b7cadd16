"""Compiled GLUE fine-tuning (eval.compile): static shapes, so a bounded number of graphs with no graph break; no
host sync in a step; the same function as the eager path, rounded differently.

Dynamo runs as it does in front of inductor, with a backend that records the graphs it is handed and runs
them as traced (inductor's code generation takes tens of seconds a graph on a 2-core CPU)."""

import functools

import pytest
import torch

from cramming.bench.host_sync import HostSyncError, no_host_sync
from cramming.eval.batching import STATIC_WIDTH_FROM, filled, static_width, subset
from cramming.eval.compiled import compiles
from cramming.eval.encoders import open_encoder
from cramming.eval.finetune import finetune
from cramming.eval.tasks.registry import GlueConfig, task_named
from cramming.engine.precision import Precision
from cramming.engine.step import Step

from .conftest import GLUE_DIR

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def rte(rte_checkpoint):
    """The tiny encoder and RTE: 40 training examples (batches of 16, 16 and 8), 50 dev examples."""
    encoder = open_encoder(str(rte_checkpoint), 0.1)
    task = task_named("rte")()
    data = task.load(str(GLUE_DIR), 0.001)
    train = subset(task.encode(data.train, encoder.tokenizer, 128), 40)
    dev = subset(task.encode(data.evaluations["rte"], encoder.tokenizer, 128), 50)
    return encoder, task, train, dev


def run(rte, seed=0, **overrides):
    encoder, task, train, dev = rte
    cfg = GlueConfig(data_dir=str(GLUE_DIR), epochs=2, eval_batch_size=32, **overrides)
    classifier = task.model(encoder, cfg.dropout, seed)
    return finetune(classifier, train, {"rte": dev}, cfg, CPU, Precision("fp32", "cpu"), seed,
                    encoder.tokenizer.pad_token_id, "rte", task.score)


@pytest.fixture
def recorded_graphs(monkeypatch) -> list[tuple[bool, tuple[int, ...]]]:
    """torch.compile with the recording backend: (whether the graph is dynamic, its input_ids shape) of each."""
    graphs = []

    def record(graph, example_inputs):
        shapes = [tuple(value.shape) for value in example_inputs if isinstance(value, torch.Tensor)
                  and value.dtype == torch.int64 and value.dim() == 2]
        dynamic = any(isinstance(size, torch.SymInt) for value in example_inputs if isinstance(value, torch.Tensor)
                      for size in value.shape)
        graphs.append((dynamic, shapes[0] if shapes else ()))
        return graph.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=record))
    return graphs


def test_static_widths_are_few_and_hold_every_example():
    assert [static_width(n, 128) for n in (1, 32, 33, 64, 65, 127, 128)] == [32, 32, 64, 64, 128, 128, 128]
    assert static_width(40, 48) == 48 and static_width(10, 20) == 20  # never past max_length ...
    assert static_width(300, 128) == 300  # ... nor below the longest example
    assert STATIC_WIDTH_FROM == 32
    assert filled([5, 2, 9], 5) == [5, 2, 9, 5, 5] and filled([1, 2], 2) == [1, 2]


def test_compile_is_on_for_gpus_and_off_for_the_cpu_unless_set():
    assert compiles(None, torch.device("cuda", 0)) and not compiles(None, CPU)
    assert compiles(True, CPU) and not compiles(False, torch.device("cuda"))


@pytest.mark.slow
def test_compiled_fine_tuning_builds_one_static_graph_per_width_and_mode(rte, recorded_graphs):
    """Two epochs of 16 + 16 + 8 examples and two evaluations of 32 + 18 (filled to 32): every graph is static,
    one per (training or evaluation, width), none for the short training batch, none for a graph break."""
    history = run(rte, compile=True)
    _, _, train, dev = rte
    assert [dynamic for dynamic, _ in recorded_graphs] == [False] * len(recorded_graphs)
    shapes = [shape for _, shape in recorded_graphs]
    assert len(shapes) == len(set(shapes)), "a shape compiled twice: the graphs were not reused"
    widths = {static_width(train.length(i), 128) for i in range(len(train))}
    assert {shape[0] for shape in shapes} == {16, 32}  # training's and evaluation's batch, not the short 8
    assert {shape[1] for shape in shapes} <= widths | {static_width(dev.length(i), 128) for i in range(len(dev))}
    assert len(shapes) <= 2 * 3  # at most three widths at max_length 128, for each mode
    assert len(history) == 2 and all(0 <= record["scores"]["rte"]["accuracy"] <= 100 for record in history)


@pytest.mark.slow
def test_compiled_fine_tuning_computes_what_the_eager_one_does(rte, recorded_graphs):
    """Without dropout (whose draws depend on the layout), padded static batches and unpadded ones give the
    same losses and scores up to rounding."""
    eager, compiled = run(rte, dropout=0.0, compile=False), run(rte, dropout=0.0, compile=True)
    assert recorded_graphs, "the compiled run compiled nothing"
    for eager_epoch, compiled_epoch in zip(eager, compiled):
        assert compiled_epoch["train_loss"] == pytest.approx(eager_epoch["train_loss"], abs=1e-5)
        assert compiled_epoch["scores"] == eager_epoch["scores"]


@pytest.fixture
def guarded_steps(monkeypatch) -> list[int]:
    """Every fine-tuning Step.run inside no_host_sync(), compiled to itself: the guard sees the eager operators
    a compiled step runs around its graphs, and the graphs' own operators (which, fullgraph, cannot sync)."""
    guarded, step_run = [], Step.run

    def run_without_a_sync(step, state, *args):
        with no_host_sync():
            step_run(step, state, *args)
        guarded.append(state.step_loss)

    monkeypatch.setattr(Step, "run", run_without_a_sync)
    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    return guarded


def test_a_compiled_fine_tuning_step_makes_no_host_sync(rte, guarded_steps):
    history = run(rte, compile=True)
    assert len(guarded_steps) == 2 * 3 and len(history) == 2  # every step of both epochs, the short one too


def test_the_guard_sees_the_eager_steps_unpadding(rte, guarded_steps):
    """The eager CPU path unpads (faster there): the number of real tokens is read from the mask."""
    with pytest.raises(HostSyncError, match="nonzero|tolist"):
        run(rte, compile=False)
    assert guarded_steps == []
