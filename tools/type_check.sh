#!/usr/bin/env bash
# mypy over the public API (quantmark/__init__.py and quantmark.api) as quantmark is installed
# (tools/installed_layout.sh). The modules the API imports are read for their types
# (follow_imports = silent: their own errors are not this check's); pyproject.toml's
# [tool.mypy] holds the settings.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/installed_layout.sh
cp pyproject.toml "$site/"
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
cd "$site" && "$python" -m mypy --config-file pyproject.toml quantmark/__init__.py quantmark/api
