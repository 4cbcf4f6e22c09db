# Sourced by tools/lint_imports.sh and tools/type_check.sh: quantmark as it is installed. In
# the repository its parts live in the card's top-level folders (sut/, report/ ...), which a
# tool walking quantmark/ on disk cannot see; the wheel has them all under quantmark/.
# Sets $python, $work (a temporary folder, removed on exit) and $site (the unpacked wheel).
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" . 2>/dev/null
"$python" -m zipfile -e "$work"/wheel/quantmark-*.whl "$work/site"
site=$work/site
