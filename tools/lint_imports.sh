#!/usr/bin/env bash
# import-linter's contracts (pyproject.toml, framework folders filled in by
# tools/import_contracts.py) over quantmark as it is installed (tools/installed_layout.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/installed_layout.sh
# pyproject.toml's contracts, the framework folders filled in from sut/ (every package there)
config=$work/importlinter.ini
"$python" tools/import_contracts.py pyproject.toml > "$config"
# from inside the unpacked wheel: lint-imports puts its working directory first on sys.path,
# and here that would be the repository's own quantmark/ folder
lint=$(cd "$(dirname "$python")" && pwd)/lint-imports
cd "$site" && "$lint" --config "$config"
