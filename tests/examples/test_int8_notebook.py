"""The example notebook (examples/int8_speedup.ipynb): kept as a valid notebook without
outputs that calls quantmark's public API only, and, in the slow tier, executed from top to
bottom by a real Jupyter kernel on this interpreter, ending in the INT8 sentence built from
measured numbers and a plot."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

import quantmark
from tests.conftest import ROOT

NOTEBOOK = ROOT / "examples" / "int8_speedup.ipynb"
#: the answer the notebook prints, one per framework: the speedup, its interval, the bound
#: on the accuracy change (whatever the verdict: faster, slower or no measurable difference)
SENTENCE = re.compile(r"INT8 .*?(\d+\.\d+)x .*?\[(\d+\.\d+), (\d+\.\d+)\].*?"
                      r"accuracy within (\d+\.\d+) points")
#: the kernel the test starts: this interpreter, whatever kernelspecs the machine has
KERNEL = "quantmark-test-python"


def _notebook() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def _code(cell: nbformat.NotebookNode) -> str:
    """A code cell as Python: IPython's line magics (``%matplotlib inline``) left out."""
    return "\n".join(line for line in cell.source.splitlines()
                     if not line.lstrip().startswith("%"))


def _code_cells() -> list[nbformat.NotebookNode]:
    return [cell for cell in _notebook().cells if cell.cell_type == "code"]


def test_the_notebook_is_valid_and_kept_without_outputs() -> None:
    """Outputs are measurements of one machine at one time: they stay out of git (the site
    does not render notebooks), so a diff of the notebook is a diff of its code."""
    notebook = _notebook()
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    stored = [n for n, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              and (cell.outputs or cell.execution_count is not None)]
    assert stored == [], f"code cells with stored outputs (clear them): {stored}"
    for cell in _code_cells():
        ast.parse(_code(cell))


def test_the_notebook_shows_the_readme_install_and_runs_nothing_else() -> None:
    """The install is shown (a markdown cell), never executed by a code cell."""
    markdown = "\n".join(c.source for c in _notebook().cells if c.cell_type == "markdown")
    assert 'pip install -c constraints.txt -e ".[cpu]"' in markdown
    assert "-c constraints.txt" in (ROOT / "README.md").read_text()
    for cell in _code_cells():
        assert "pip install" not in cell.source
        assert not [line for line in cell.source.splitlines() if line.lstrip().startswith("!")]


def test_the_notebook_uses_the_public_api_only() -> None:
    imports, names = [], set()
    for cell in _code_cells():
        for node in ast.walk(ast.parse(_code(cell))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                imports += [(module, alias.name, alias.asname) for alias in node.names]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "qm"):
                names.add(node.attr)
    ours = [entry for entry in imports if "quantmark" in f"{entry[0]} {entry[1]}"]
    assert ours == [(None, "quantmark", "qm")]
    assert {"sweep", "__version__"} <= names
    assert names <= set(quantmark.__all__), names - set(quantmark.__all__)


def _kernel_here(folder: Path) -> Path:
    """A kernelspec that starts ipykernel on this interpreter (the venv's, with quantmark),
    in its own Jupyter data folder: a ``python3`` spec in the user's folder cannot win."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "quantmark tests", "language": "python"}))
    return folder


def _texts(cell: nbformat.NotebookNode) -> str:
    found = []
    for output in cell.get("outputs", []):
        found.append(output.get("text", ""))
        found.append(output.get("data", {}).get("text/plain", ""))
    return "".join(found)


@pytest.mark.slow
def test_the_notebook_runs_to_its_answer_and_plot(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell in a kernel on this interpreter, in an empty folder, with a results store
    of its own (the shared model cache stays, as for every test)."""
    from nbclient import NotebookClient

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_here(tmp_path / "jupyter")))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # not the home's
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("QUANTMARK_STORE", f"sqlite:///{tmp_path / 'store.db'}")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = _notebook()
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    NotebookClient(notebook, kernel_name=KERNEL, timeout=900,
                   resources={"metadata": {"path": str(work)}}).execute()

    assert _texts(notebook.cells[-1]).strip() == sys.executable
    everything = "".join(_texts(cell) for cell in notebook.cells)
    found = SENTENCE.findall(everything)
    assert len(found) == 2, everything[-3000:]  # ONNX Runtime's and OpenVINO's
    for speedup, low, high, within in found:
        assert float(low) <= float(speedup) <= float(high) and float(within) >= 0
    pictures = [output for cell in notebook.cells for output in cell.get("outputs", [])
                if "image/png" in output.get("data", {})]
    assert pictures, "the notebook drew no plot"
    assert (work / "int8-speedup.png").is_file() and (work / "int8-sweep" / "report.csv").is_file()
