#!/usr/bin/env bash
# Install quantmark's lean set for a Raspberry Pi (or any aarch64 Linux) into a virtual
# environment: LoadGen, numpy, pillow and ai-edge-litert, and no TensorFlow, torch or OpenVINO.
#
#   tools/pi_install.sh [VENV]        (default: .venv in the project folder)
#   EXTRAS=pi,ray tools/pi_install.sh  (a fleet node: Ray too, for run.py node)
#
# mlcommons-loadgen publishes no aarch64 wheel, so pip builds it from its source with a C++
# compiler and the Python headers (about 2 minutes on a Pi 5). They are checked first, so a
# missing one is one line naming the Debian packages instead of a page of compiler output.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}
LOADGEN="mlcommons-loadgen>=4.1"

die() {
    echo "quantmark install: $*" >&2
    exit 1
}

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: sudo apt install python3 python3-venv"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "quantmark needs Python 3.10 or newer, $PYTHON is $("$PYTHON" -V 2>&1)"
"$PYTHON" -c 'import ensurepip' 2>/dev/null ||
    die "Python's venv module is incomplete: sudo apt install python3-venv"
[ -x "$VENV/bin/pip" ] || "$PYTHON" -m venv "$VENV"

# A binary wheel for this machine (PyPI's, or one in PIP_FIND_LINKS) needs no compiler.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! "$VENV/bin/pip" download -q --only-binary=:all: --no-deps "$LOADGEN" -d "$probe" \
        >/dev/null 2>&1; then
    missing=()
    command -v "${CXX:-g++}" >/dev/null || missing+=("g++")
    include=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -f "$include/Python.h" ] || missing+=("python3-dev")
    if [ ${#missing[@]} -gt 0 ]; then
        die "mlcommons-loadgen has no wheel for $(uname -m) and is built from source, but" \
            "${missing[*]} is missing: sudo apt install ${missing[*]}"
    fi
    echo "quantmark install: building mlcommons-loadgen from source for $(uname -m)" \
         "(a few minutes; pip keeps the wheel for next time)" >&2
fi

EXTRAS=${EXTRAS:-pi}
"$VENV/bin/pip" install -q -e ".[$EXTRAS]"
imports="mlperf_loadgen, ai_edge_litert.interpreter, numpy, PIL"
case ",$EXTRAS," in *,ray,*) imports="$imports, ray" ;; esac
"$VENV/bin/python" -c "import $imports" ||
    die "the install finished but its packages do not import; see pip's output above"
echo "quantmark installed in $VENV ($(uname -m)): $VENV/bin/python run.py --list-suts"
