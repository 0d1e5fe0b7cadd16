"""The layout the project promises: every package in the wheel with the configs, commands that run from an
installed wheel outside the checkout, thin scripts, no fragment modules, and a model import without transformers."""

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.commands import SCRIPTS, modules_after
from tests.conftest import REPO_ROOT
from tests.train.runs import NO_PROBE

# A module holds one idea a reader can name: not a 20-line fragment (it belongs with its owner), nor a drawer of
# several (no line cap stands in for that judgement). Faces (__init__.py, and a module that only gathers names from
# others, defining no function or class) and the command modules of cramming/cli (each the wiring of one
# command) are exempt from the lower bound.
MIN_MODULE_LINES = 25
MAX_MODULE_LINES = 300  # beyond it, a module says in its docstring that it holds one concept, and which
# cramming/train/'s own files: a trainer a newcomer can survey, one concept a file. Its techniques/ are a catalogue
# that grows by design, one file a technique, and are not counted.
MAX_TRAINER_FILES = 24
MAX_SCRIPT_LINES = 60


def test_the_wheel_lists_every_package_and_maps_the_configs():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {".".join(path.parent.relative_to(REPO_ROOT).parts)
                for path in (REPO_ROOT / "cramming").rglob("__init__.py")}
    assert set(setuptools["packages"]) == packages | {"cramming.configs"}
    assert setuptools["package-dir"] == {"cramming.configs": "configs"}


def test_every_command_is_installed_as_a_console_script():
    """Each command the tests run (tests/commands.py) is also `cramming-<command>` once the wheel is installed."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {f"cramming-{name.replace('_', '-')}": f"cramming.cli.{name}:main" for name in SCRIPTS}


def defines_nothing(path: Path) -> bool:
    return not any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in ast.parse(path.read_text()).body)


def test_no_fragment_modules_a_surveyable_trainer_and_thin_scripts():
    faces = {path for path in (REPO_ROOT / "cramming").rglob("*.py") if path.name == "__init__.py"
             or path.parent == REPO_ROOT / "cramming" / "cli" or defines_nothing(path)}
    fragments = {str(path.relative_to(REPO_ROOT)): lines for path in (REPO_ROOT / "cramming").rglob("*.py")
                 if path not in faces and (lines := len(path.read_text().splitlines())) < MIN_MODULE_LINES}
    assert fragments == {}
    drawers = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "cramming").rglob("*.py")
                     if len(path.read_text().splitlines()) > MAX_MODULE_LINES
                     and "one concept" not in " ".join((ast.get_docstring(ast.parse(path.read_text())) or "")
                                                       .lower().split()))
    assert drawers == []
    trainer_files = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "cramming" / "train").glob("*.py"))
    assert len(trainer_files) <= MAX_TRAINER_FILES, trainer_files
    fat_scripts = {path.name: lines for path in (REPO_ROOT / "scripts").glob("*.py")
                   if (lines := len(path.read_text().splitlines())) > MAX_SCRIPT_LINES}
    assert fat_scripts == {}


def test_nothing_touches_sys_path():
    sources = [*(REPO_ROOT / "cramming").rglob("*.py"), *(REPO_ROOT / "scripts").glob("*.py"),
               REPO_ROOT / "pretrain.py", REPO_ROOT / "eval_glue.py"]
    editing = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                editing.append(str(path.relative_to(REPO_ROOT)))
    assert editing == []


def test_importing_the_model_or_a_command_does_not_import_transformers():
    """transformers takes about a second to import: not on every command's start (a refused override, --help)."""
    commands = "cramming.cli.pretrain, cramming.cli.prepare_data, cramming.cli.eval_glue, cramming.cli.export"
    assert "transformers" not in modules_after(f"import cramming.model, {commands}, cramming.cli.zero_shot")


def package_directories() -> list[str]:
    """The site-packages directories this interpreter imports from, whether it runs from a venv, a conda env
    or the system's. `venv --system-site-packages` would give a nested venv the *base* interpreter's, which
    lack the active venv's torch and hydra. As plain paths in a .pth file their own .pth files (the
    checkout's editable install among them) are not run: the nested venv sees the packages, not the checkout."""
    return [path for path in sys.path if Path(path).name in ("site-packages", "dist-packages") and Path(path).is_dir()]


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_runs_the_quick_start_outside_the_checkout(tmp_path, simulated_clock):
    source = tmp_path / "source"  # setuptools builds inside the source tree: keep the checkout clean
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name)
    for name in ("cramming", "configs"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("cramming-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"cramming/configs/pretrain.yaml", "cramming/configs/quickstart.yaml", "cramming/configs/gpu/cpu.yaml",
            "cramming/configs/arch/crammed-bert-tiny.yaml", "cramming/configs/zero_shot.yaml",
            *(f"cramming/eval/blimp_data/{name}" for name in ("blimp_subset.jsonl.gz", "models_summary.jsonl",
                                                              "human_validation_summary.csv", "README.md"))} <= names

    venv = tmp_path / "venv"  # sees this interpreter's packages (torch, ...), but not the checkout
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    (site_packages / "this-interpreters-packages.pth").write_text("\n".join(package_directories()) + "\n")
    # without the checkout on PYTHONPATH (tests/conftest.py puts it there): pip would take its egg-info for
    # an installed cramming and install nothing
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["CRAMMING_CACHE"] = str(tmp_path / "cache")
    installed = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([venv / "bin" / "python", "-c", "import cramming; print(cramming.CONFIG_DIR)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    site_packages = next(venv.glob("lib/python*/site-packages"))
    assert where.stdout.strip() == str(site_packages / "cramming" / "configs"), where.stderr
    run = subprocess.run([venv / "bin" / "cramming-pretrain", "--config-name", "quickstart", NO_PROBE, "budget=0.0005"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (elsewhere / "outputs" / "quickstart").iterdir()
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()
    assert (run_dir / "summary.json").is_file()


def test_the_test_script_has_its_own_help():
    """scripts/test.sh --help ran the setup (pip) and then printed only pytest's help."""
    run = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "test.sh"), "--help"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout.startswith("usage: bash scripts/test.sh [--locked] [pytest arguments...]")
    assert "--locked" in run.stdout and "python3 -m pytest --help" in run.stdout
