#!/usr/bin/env bash
# Does Ray install beside quantmark's lean Raspberry Pi set, from aarch64 wheels alone?
# pip resolves (and downloads, installing nothing) the Pi set plus the ray extra for a
# 64-bit Raspberry Pi OS (Python 3.11, manylinux aarch64). LoadGen is left out: it has no
# aarch64 wheel and builds from its source on the Pi (tools/pi_install.sh).
#
#   tools/pi_ray_check.sh [PIP]      (default: .venv/bin/pip)
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${1:-.venv/bin/pip}
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
# the core's requirements but LoadGen, the "pi" extra and the "ray" extra, as setup.py says
requirements=$(python3 - <<'PY'
import ast, re
text = open("setup.py").read()
def listed(name):
    return ast.literal_eval(re.search(rf"^{name} = (\[.*?\])", text, re.M | re.S)[1])
core = ast.literal_eval(re.search(r"install_requires=(\[.*?\])", text, re.S)[1])
keep = [r for r in core if not r.startswith("mlcommons-loadgen") and ";" not in r]
print("\n".join(keep + listed("TFLITE") + listed("RAY")))
PY
)
mapfile -t wanted <<<"$requirements"
if ! found=$("$PIP" install --dry-run --ignore-installed --only-binary=:all: \
        --python-version 3.11 --platform manylinux2014_aarch64 \
        --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64 \
        --target "$target" "${wanted[@]}" 2>&1); then
    echo "pi_ray_check: no aarch64 wheel set resolves:" >&2
    grep -v "^WARNING: Location" <<<"$found" | tail -5 >&2
    exit 1
fi
grep "^Would install" <<<"$found"
