"""The import contracts cannot drift from the folders they guard.

import-linter checks only the modules a contract names: a new ``sut/<framework>/`` left out of
the independence contract would be silently unchecked, and a contract naming a folder that was
renamed or removed guards nothing. So the contract lists no folders in pyproject.toml:
``tools/import_contracts.py`` fills them in from ``sut/`` each time the contracts are checked.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import import_contracts  # noqa: E402 - a script in tools/, not a package module

LAYERS = ("CLI -> api -> commands -> jobs -> run -> report -> SUTs -> QSL, scenarios, models "
          "-> ground")


def _ini(pyproject: Path = ROOT / "pyproject.toml") -> configparser.ConfigParser:
    """What tools/lint_imports.sh hands import-linter, as it prints it."""
    printed = subprocess.run([sys.executable, str(ROOT / "tools" / "import_contracts.py"),
                              str(pyproject)], capture_output=True, text=True, check=True)
    parser = configparser.ConfigParser()
    parser.read_string(printed.stdout)
    return parser


def _contract(parser: configparser.ConfigParser, name: str) -> configparser.SectionProxy:
    found = [parser[s] for s in parser.sections() if parser[s].get("name") == name]
    assert len(found) == 1, f"{len(found)} contracts named {name!r}"
    return found[0]


def test_every_framework_folder_is_in_the_independence_contract_by_construction():
    contract = _contract(_ini(), import_contracts.INDEPENDENCE)
    modules = contract["modules"].split()
    folders = sorted(p.parent.name for p in (ROOT / "sut").glob("*/__init__.py"))
    assert contract["type"] == "independence"
    assert modules == [f"quantmark.sut.{folder}" for folder in folders]
    assert {"onnxruntime", "openvino", "pytorch", "tensorflow", "tensorrt", "tflite",
            "ensemble"} <= set(folders)


def test_the_layers_contract_passes_through_unchanged():
    layers = _contract(_ini(), LAYERS)["layers"].split("\n")
    assert [layer.strip() for layer in layers if layer.strip()][:3] == [
        "quantmark.cli", "quantmark.api", "quantmark.bench"]


def test_a_new_folder_is_guarded_and_a_removed_one_is_not_named(tmp_path):
    """The mechanism on a made-up tree: what exists is named, nothing else."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for folder in ("alpha", "beta"):
        (tmp_path / "sut" / folder).mkdir(parents=True)
        (tmp_path / "sut" / folder / "__init__.py").write_text("")
    (tmp_path / "sut" / "not_a_package").mkdir()
    contract = _contract(_ini(tmp_path / "pyproject.toml"), import_contracts.INDEPENDENCE)
    assert contract["modules"].split() == ["quantmark.sut.alpha", "quantmark.sut.beta"]


def test_a_hand_written_module_list_is_refused(tmp_path):
    """A list in pyproject.toml would be the drift this replaces: refused, with the fix."""
    text = (ROOT / "pyproject.toml").read_text().replace(
        'type = "independence"', 'type = "independence"\nmodules = ["quantmark.sut.alpha"]')
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(SystemExit, match="lists modules; remove them"):
        import_contracts.contracts(tmp_path / "pyproject.toml", tmp_path / "sut")


ACYCLIC = "No import circles inside a folder"


def _folder(package: str) -> Path:
    """Where a quantmark package lives in the repository (setup.py maps quantmark.sut to
    sut/, quantmark.run stays quantmark/run/)."""
    part, *rest = package.split(".")[1:]
    top = ROOT / part
    return (top if (top / "__init__.py").is_file() else ROOT / "quantmark" / part).joinpath(*rest)


def test_no_folder_may_hold_an_import_circle_and_a_skipped_one_exists():
    """The acyclic contract starts at quantmark itself, so every package (a new one too) is
    checked; the folders it skips, if any (circles left to break; none today), must still
    exist: a renamed or removed one would be skipped silently under a name nothing has."""
    contract = _contract(_ini(), ACYCLIC)
    assert contract["type"] == "acyclic_siblings"
    assert contract["ancestors"].split() == ["quantmark"]
    skipped = contract.get("skip_descendants", "").split()
    for package in skipped:
        assert (_folder(package) / "__init__.py").is_file(), f"{package} is skipped: no package"
    assert not {"quantmark.recommend", "quantmark.sweep", "quantmark.diagnosis",
                "quantmark.run", "quantmark.store", "quantmark.report", "quantmark.ground",
                "quantmark.sut.openvino", "quantmark.sut.tflite"} & set(skipped)
