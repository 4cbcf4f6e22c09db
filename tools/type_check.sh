#!/usr/bin/env bash
# mypy over the public API (quantmark/__init__.py and quantmark.api) as quantmark is
# installed: in the repository its parts live in the card's top-level folders (report/, sut/
# ...), which mypy, reading quantmark/ on disk, cannot see; the wheel has them all under
# quantmark/. The modules the API imports are read for their types (follow_imports = silent:
# their own errors are not this check's); pyproject.toml's [tool.mypy] holds the settings.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" . 2>/dev/null
"$python" -m zipfile -e "$work"/wheel/quantmark-*.whl "$work/site"
cp pyproject.toml "$work/site/"
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
cd "$work/site" && "$python" -m mypy --config-file pyproject.toml quantmark/__init__.py \
    quantmark/api
