"""import-linter's configuration, with the framework folders filled in from the tree.

pyproject.toml holds the contracts. The independence contract's modules are not listed there:
they are every package ``sut/<folder>/``, found here when the
contracts are checked, so a new framework folder is guarded the moment it exists and a removed
one is never named. ``tools/lint_imports.sh`` runs import-linter on what this prints (INI).

    python tools/import_contracts.py [PYPROJECT] > importlinter.ini
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli setup.py pins there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
INDEPENDENCE = "Framework folders are independent of each other"
TASK_INDEPENDENCE = "Task folders are independent of each other"


def framework_folders(sut: Path) -> list[str]:
    """The packages under ``sut`` (or ``tasks``): each is one framework's (task's) folder (the
    ensemble's included)."""
    return sorted(path.parent.name for path in sut.glob("*/__init__.py"))


def contracts(pyproject: Path, sut: Path) -> tuple[str, list[dict]]:
    """(root package, the contracts) with the independence contracts' modules filled in: the
    framework folders under ``sut`` and the task folders under ``tasks`` beside it."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    folders = {INDEPENDENCE: ("sut", sut), TASK_INDEPENDENCE: ("tasks", sut.parent / "tasks")}
    found = []
    for contract in config["contracts"]:
        if contract["name"] in folders:
            if "modules" in contract:
                raise SystemExit(f"{pyproject}: the contract {contract['name']!r} lists "
                                 "modules; remove them: tools/import_contracts.py finds the "
                                 "folders")
            part, where = folders[contract["name"]]
            contract = {**contract, "modules": [f"quantmark.{part}.{folder}"
                                                for folder in framework_folders(where)]}
        found.append(contract)
    names = {contract["name"] for contract in found}
    for name in (INDEPENDENCE, TASK_INDEPENDENCE):
        if name not in names:
            raise SystemExit(f"{pyproject}: no contract named {name!r}")
    return config["root_package"], found


def to_ini(root_package: str, found: list[dict]) -> str:
    """The contracts in import-linter's INI form (lists one item a line)."""
    lines = ["[importlinter]", f"root_package = {root_package}", ""]
    for number, contract in enumerate(found, 1):
        lines.append(f"[importlinter:contract:{number}]")
        for key, value in contract.items():
            if isinstance(value, list):
                lines += [f"{key} ="] + [f"    {item}" for item in value]
            else:
                lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    pyproject = Path(argv[0]) if argv else ROOT / "pyproject.toml"
    sys.stdout.write(to_ini(*contracts(pyproject, pyproject.parent / "sut")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
