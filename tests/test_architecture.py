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
    ("ablate", "bench"),
    ("preflight",),
    ("pretraining",),
    ("train", "eval"),
    ("engine", "model"),
    ("data", "provenance"),
    ("cramming",),  # the package's own __init__: its version and where configs/ is
    ("files", "threads", "library_noise", "plugins", "phase_progress", "hub"),
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
    """The part a module belongs to: cramming.train.loop -> train, cramming.errors -> errors, cramming -> cramming."""
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


def profile_steps(tmp_path, monkeypatch, overrides: list[str]) -> tuple[set[str], set[str]]:
    """Profile every call into the package during pretraining's steps (cramming.train.loop.train_step, a real run of
    TINY_RUN and `overrides`), the model and the data aside: the files entered, and each call from a function of
    cramming/engine/ into one of cramming/train/ as "caller -> callee" (file:function)."""
    import sys

    from cramming.pretraining import pretrain
    from cramming.train import loop
    from tests.train.runs import TINY_RUN, compose_config

    entered, upward, skipped = set(), set(), [0]

    def relative(code) -> str:
        return "cramming/" + code.co_filename.removeprefix(f"{PACKAGE}/")

    def profile(frame, event, arg):
        if event not in ("call", "return") or f"{PACKAGE}/" not in frame.f_code.co_filename:
            return
        callee = relative(frame.f_code)
        if callee.startswith(NOT_THE_STEP) or skipped[0]:
            skipped[0] += 1 if event == "call" else -1
            return
        if event == "call":
            entered.add(callee)
            caller = frame.f_back
            if (callee.startswith("cramming/train/") and caller is not None
                    and relative(caller.f_code).startswith("cramming/engine/")):
                upward.add(f"{relative(caller.f_code)}:{caller.f_code.co_name} -> {callee}:{frame.f_code.co_name}")

    def profiled_step(*args, **kwargs):
        sys.setprofile(profile)
        try:
            return train_step(*args, **kwargs)
        finally:
            sys.setprofile(None)

    train_step = loop.train_step
    monkeypatch.setattr(loop, "train_step", profiled_step)
    # the default recipe (train=scaled), two steps of two microbatches each (no ramp), so the budget check between
    # the microbatches runs
    pretrain(compose_config(TINY_RUN + ["train.max_steps=2", "train.batch_size=32", "impl.microbatch_size=16",
                                        "train.batch_ramp_fraction=0", f"output_dir={tmp_path}", *overrides]))
    return entered, upward


# What one step of the default recipe enters, the model and the data aside: the loop's step function, the engine's
# step, the budget check (with its clock), the non-finite counter. At most four: what a reader of the step opens.
DEFAULT_STEP_FILES = {"cramming/train/loop.py", "cramming/engine/step.py", "cramming/train/stopping.py",
                      "cramming/train/nonfinite.py"}


def test_a_pretraining_step_calls_only_downward(tmp_path, monkeypatch):
    """Measured with a profiler on the default recipe: the loop's step function (cramming.train.loop.train_step)
    calls the budget check, the non-finite counter and the engine's parts itself, and the engine calls nothing in
    cramming/train/. The heartbeat and the metrics run after the step, not inside it."""
    entered, upward = profile_steps(tmp_path, monkeypatch, [])
    assert upward == set()
    assert entered == DEFAULT_STEP_FILES and len(entered) <= 4


def test_with_sam_on_the_step_enters_only_the_technique_itself(tmp_path, monkeypatch):
    """A technique that acts inside the step is the only thing the engine calls up into: SAM's after_gradients,
    which runs the step's own backward again (downward from there)."""
    entered, upward = profile_steps(tmp_path, monkeypatch, ["train.optim.sam_rho=0.05"])
    assert upward == {"cramming/engine/step.py:gradients -> cramming/train/techniques/sam.py:after_gradients"}
    assert entered - DEFAULT_STEP_FILES == {"cramming/train/techniques/sam.py"}


def test_the_step_is_handed_no_function_to_call_back():
    """What techniques do inside a step reaches it as one StepPoints object with named points, not as loose
    functions passed in from above."""
    import inspect
    import typing

    from cramming.engine.step import Step

    hints = typing.get_type_hints(Step.__init__)
    passed_functions = [name for name in inspect.signature(Step.__init__).parameters
                        if "Callable" in str(hints.get(name, ""))]
    assert passed_functions == []


def test_every_plug_in_kind_has_one_shape():
    """Techniques, optimizers, data sources and tasks alike: Plugin classes in their kind's Registry, each with a
    unique short `name` (a choice value: no dots, no `=`), its keys as `settings`, and the class methods `check` (one
    section, called for every registered plug-in, chosen or not) and `build` (docs/architecture.md)."""
    import inspect

    from cramming.data.sources import SOURCES
    from cramming.eval.tasks.registry import TASKS
    from cramming.plugins import Plugin, Registry, Setting
    from cramming.train.optimizers import OPTIMIZERS
    from cramming.train.techniques import TECHNIQUES

    for registry in (TECHNIQUES, OPTIMIZERS, SOURCES, TASKS):
        assert isinstance(registry, Registry)
        assert all(isinstance(plug_in, type) and issubclass(plug_in, Plugin) for plug_in in registry)
        names = list(registry.names)
        assert all(name and "." not in name and "=" not in name for name in names), names
        assert len(names) == len(registry)
        assert all(isinstance(plug_in.settings, tuple) and all(isinstance(setting, Setting) for setting in
                                                                   plug_in.settings) for plug_in in registry)
        for hook in ("check", "build"):
            not_class_methods = [plug_in for plug_in in registry
                                 if not isinstance(inspect.getattr_static(plug_in, hook), classmethod)]
            assert not_class_methods == [], (hook, not_class_methods)
            one_section = [plug_in for plug_in in registry
                           if list(inspect.signature(getattr(plug_in, hook)).parameters)[0] in ("cls", "self")]
            assert one_section == [], (hook, one_section)
