"""The import contracts in pyproject.toml cannot drift from the folders they guard.

import-linter checks only the modules a contract names: a new ``sut/<framework>/`` left out of
the independence contract would be silently unchecked, and a contract naming a folder that was
renamed or removed guards nothing. Both fail here, read from pyproject.toml itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli the setup.py pins there
    import tomli as tomllib

INDEPENDENCE = "Framework folders are independent of each other"
PREFIX = "quantmark.sut."


def _contract(name: str, pyproject: Path = ROOT / "pyproject.toml") -> dict:
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    found = [contract for contract in contracts if contract["name"] == name]
    assert len(found) == 1, f"pyproject.toml has {len(found)} contracts named {name!r}"
    return found[0]


def framework_folders(sut: Path = ROOT / "sut") -> set[str]:
    """The folders under sut/ that are frameworks: they declare their SUTs in a suts.py."""
    return {path.parent.name for path in sut.glob("*/suts.py")}


def drift(contract: dict, sut: Path = ROOT / "sut") -> list[str]:
    """What is wrong between the independence contract and the folders under ``sut``."""
    named = {module.removeprefix(PREFIX) for module in contract["modules"]}
    problems = [f"{module} is not a quantmark.sut folder" for module in contract["modules"]
                if not module.startswith(PREFIX) or "." in module.removeprefix(PREFIX)]
    problems += [f"sut/{folder}/ (a framework: it has suts.py) is missing from the contract"
                 for folder in sorted(framework_folders(sut) - named)]
    problems += [f"the contract names quantmark.sut.{folder}, but sut/{folder}/ is no package"
                 for folder in sorted(named)
                 if not (sut / folder / "__init__.py").is_file()]
    return problems


def test_the_independence_contract_names_every_framework_folder_and_no_other():
    contract = _contract(INDEPENDENCE)
    assert contract["type"] == "independence"
    assert drift(contract) == []
    assert {"onnxruntime", "openvino", "pytorch", "tensorflow", "tensorrt",
            "tflite"} <= framework_folders()


def test_a_new_framework_folder_or_a_stale_name_is_caught(tmp_path):
    """The check itself: a framework folder the contract lacks, and a name with no folder."""
    for folder in ("alpha", "beta"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "alpha" / "suts.py").write_text("")
    (tmp_path / "beta" / "suts.py").write_text("")
    contract = {"modules": ["quantmark.sut.alpha", "quantmark.sut.gone"]}
    assert drift(contract, tmp_path) == [
        "sut/beta/ (a framework: it has suts.py) is missing from the contract",
        "the contract names quantmark.sut.gone, but sut/gone/ is no package"]
    assert drift({"modules": ["quantmark.models", "quantmark.sut.alpha.suts"]}, tmp_path)[:2] \
        == ["quantmark.models is not a quantmark.sut folder",
            "quantmark.sut.alpha.suts is not a quantmark.sut folder"]
