"""The package's import graph: no module imports itself back through others (no circles), and every import
between parts of the package runs downhill, through the layers docs/architecture.md draws. Every import counts:
at module level, inside a function, or under TYPE_CHECKING (a circle hidden in a function is still one)."""

import ast
from pathlib import Path

import cramming

PACKAGE = Path(cramming.__file__).resolve().parent

# The parts of the package from the top down; a part may import those in rows below its own, and itself.
LAYERS = (
    ("cli",),
    ("calculator",),
    ("ablate", "bench", "golden"),
    ("preflight",),
    ("pretraining",),
    ("train", "eval"),
    ("engine", "model"),
    ("data", "hardware", "runs", "provenance"),
    ("cramming",),  # the package's own __init__: its version and where configs/ is
    ("files", "threads", "library_noise", "plugin_keys", "phase_progress", "hub"),
    ("errors",),
)
LAYER_OF = {part: depth for depth, parts in enumerate(LAYERS) for part in parts}


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("cramming", *path.relative_to(PACKAGE).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (`from a.b import c` imports a.b.c if it is a module, else
    a.b; importing a submodule runs its packages' __init__ too, which counts as importing them)."""
    known = modules()

    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*kept, *filter(None, [base])])
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            targets |= {nearest(name) for name in names if name.split(".")[0] == "cramming"}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on_stack.add(root)  # noqa: E702
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter[0]; counter[0] += 1  # noqa: E702
                    stack.append(successor); on_stack.add(successor)  # noqa: E702
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop(); on_stack.discard(member); component.append(member)  # noqa: E702
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def part_of(module: str) -> str:
    """The part a module belongs to: cramming.train.loop -> train, cramming.runs -> runs, cramming -> cramming."""
    return module.split(".")[1] if "." in module else module


def test_no_module_imports_itself_back():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_import_between_parts_runs_downhill():
    graph = import_graph()
    unlisted = sorted({part_of(module) for module in graph} - set(LAYER_OF))
    assert unlisted == [], f"parts missing from LAYERS (and from docs/architecture.md): {unlisted}"
    uphill = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if part_of(module) != part_of(target) and LAYER_OF[part_of(target)] <= LAYER_OF[part_of(module)])
    assert uphill == []


def test_training_and_evaluation_do_not_import_each_other():
    graph = import_graph()
    across = [f"{module} -> {target}" for module, targets in graph.items() for target in targets
              if {part_of(module), part_of(target)} == {"train", "eval"}]
    assert across == []


# What a reader of the step need not open: the model (its forward) and the data (a batch's production).
NOT_THE_STEP = ("cramming/model/", "cramming/data/")


def files_a_step_runs(tmp_path, monkeypatch) -> tuple[set[str], set[str]]:
    """The package's files whose code runs inside pretraining's steps (Step.run, rank 0, a real run), outside
    NOT_THE_STEP: those of the step itself, and apart from them those of the bodies behind its named points
    (cramming.train.loop.PretrainingHooks, the callbacks and rules it calls)."""
    import sys

    from cramming.engine.step import Step, StepHooks
    from cramming.pretraining import pretrain
    from cramming.train import resume
    from cramming.train.loop import PretrainingHooks
    from tests.train.runs import STEP_RUN, compose_config

    hook_bodies = {getattr(PretrainingHooks, name).__code__ for name in vars(StepHooks)
                   if callable(getattr(StepHooks, name)) and not name.startswith("_")}
    step_files, hook_files, depth = set(), set(), {"skipped": 0, "hooks": 0}

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event not in ("call", "return") or f"{PACKAGE}/" not in path:
            return
        relative = "cramming/" + path.removeprefix(f"{PACKAGE}/")
        entering = event == "call"
        if frame.f_code in hook_bodies:
            depth["hooks"] += 1 if entering else -1
        if relative.startswith(NOT_THE_STEP) or depth["skipped"]:
            depth["skipped"] += 1 if entering else -1
        elif entering:
            (hook_files if depth["hooks"] else step_files).add(relative)

    def profiled_run(*args, **kwargs):
        sys.setprofile(profile)
        try:
            return run(*args, **kwargs)
        finally:
            sys.setprofile(None)

    run = Step.run
    monkeypatch.setattr(Step, "run", profiled_run)
    # the heartbeat writes at every microbatch, not by the clock
    monkeypatch.setattr(resume, "HEARTBEAT_INTERVAL_S", 0.0)
    pretrain(compose_config(STEP_RUN + ["train.max_steps=2", f"output_dir={tmp_path}"]))
    return step_files, hook_files


def test_a_pretraining_step_reads_top_to_bottom_in_three_files(tmp_path, monkeypatch):
    """A reader follows a step in Step.run and the two files it calls into (the precision's autocast, the
    learning rate set on the optimizer), the model and the data aside; pretraining's own rules act at the
    step's named points, from the files listed second."""
    step_files, hook_files = files_a_step_runs(tmp_path, monkeypatch)
    assert step_files == {"cramming/engine/step.py", "cramming/engine/precision.py", "cramming/engine/schedules.py"}
    assert hook_files == {"cramming/train/loop.py", "cramming/train/callbacks.py", "cramming/train/stopping.py",
                          "cramming/train/nonfinite.py", "cramming/train/resume.py", "cramming/train/progress.py",
                          "cramming/files.py"}


def test_the_step_is_handed_no_function_to_call_back():
    """What differs between trainers reaches the step as one StepHooks object with named points, not as
    functions passed in from above."""
    import inspect
    import typing

    from cramming.engine.step import Step

    hints = typing.get_type_hints(Step.__init__)
    passed_functions = [name for name in inspect.signature(Step.__init__).parameters
                        if "Callable" in str(hints.get(name, ""))]
    assert passed_functions == []


def test_every_plug_in_kind_has_one_shape():
    """Techniques, optimizers, data sources and tasks alike: classes in their kind's tuple, each with a unique
    `name`, its own keys as `settings`, and one rule hook, the class method `check` (called for every registered
    plug-in, chosen or not: docs/architecture.md)."""
    import inspect

    from cramming.data.sources import SOURCES
    from cramming.eval.tasks.registry import TASKS
    from cramming.train.optimizers import OPTIMIZERS
    from cramming.train.techniques import TECHNIQUES

    for registry in (TECHNIQUES, OPTIMIZERS, SOURCES, TASKS):
        assert all(isinstance(plug_in, type) for plug_in in registry)
        names = [plug_in.name for plug_in in registry]
        assert all(isinstance(name, str) and name for name in names) and len(set(names)) == len(names), names
        assert all(isinstance(plug_in.settings, tuple) for plug_in in registry)
        assert all(isinstance(inspect.getattr_static(plug_in, "check"), classmethod) for plug_in in registry), [
            plug_in for plug_in in registry if not isinstance(inspect.getattr_static(plug_in, "check"), classmethod)]
