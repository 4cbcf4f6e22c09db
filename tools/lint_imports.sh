#!/usr/bin/env bash
# import-linter's contracts (pyproject.toml, framework folders filled in by
# tools/import_contracts.py) over quantmark as it is installed. In the repository quantmark's
# parts live in the card's top-level folders (sut/, qsl/ ...), which import-linter,
# walking quantmark/ on disk, cannot see; the wheel has them all under quantmark/.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" . 2>/dev/null
"$python" -m zipfile -e "$work"/wheel/quantmark-*.whl "$work/site"
# pyproject.toml's contracts, the framework folders filled in from sut/ (every package there)
config=$work/importlinter.ini
"$python" tools/import_contracts.py pyproject.toml > "$config"
# from inside the unpacked wheel: lint-imports puts its working directory first on sys.path,
# and here that would be the repository's own quantmark/ folder
lint=$(cd "$(dirname "$python")" && pwd)/lint-imports
cd "$work/site" && "$lint" --config "$config"
