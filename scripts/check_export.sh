#!/usr/bin/env bash
# Opt-in: does our export load, with the same outputs, in other transformers versions?
#   bash scripts/check_export.sh 4.50.3 4.57.6 5.23.0
# Makes a tiny export with the installed environment, then for each VERSION a venv (kept in
# $CRAMMING_VENVS, default ~/.cache/cramming/transformers-venvs) that shares this environment's torch and
# project (also from an activated virtualenv) and installs
# transformers==VERSION from PyPI, and compares token ids, logits and hidden states there (1e-4).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -eq 0 ]]; then
  echo "error: name one or more transformers versions, e.g. bash scripts/check_export.sh 4.50.3 4.57.6" >&2
  exit 2
fi
venvs="${CRAMMING_VENVS:-$HOME/.cache/cramming/transformers-venvs}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 scripts/check_export.py make "$work"
failed=0
for version in "$@"; do
  venv="$venvs/$version"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "setting up transformers==$version in $venv"
    # The venv sees this environment's packages (torch, the project) behind its own: a .pth that adds this
    # interpreter's site directories. --system-site-packages would show the base interpreter's instead,
    # which from an activated virtualenv has neither torch nor the project.
    python3 -m venv "$venv"
    "$venv/bin/python" - "$(python3 -c 'import site; print(repr(site.getsitepackages()))')" <<'PY'
import sys, sysconfig
from pathlib import Path
line = f"import site; list(map(site.addsitedir, {sys.argv[1]}))\n"  # a .pth runs import lines
Path(sysconfig.get_paths()["purelib"], "parent-environment.pth").write_text(line)
PY
    "$venv/bin/python" -m pip install -q "transformers==$version" 2>&1 | grep -v "dependency conflicts\|requires\|WARNING" || true
  fi
  if output="$("$venv/bin/python" scripts/check_export.py check "$work" 2>&1)"; then
    echo "$output" | tail -1
  else
    failed=1
    echo "$output" | tail -3
    echo "transformers $version: FAILED"
  fi
done
exit $failed
