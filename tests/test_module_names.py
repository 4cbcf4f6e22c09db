"""No two modules of the installed package share a name, and no module is named like a package:
where a name says what a thing is, one reader, one grep and one traceback line find one file.

The framework folders (``sut/<framework>/``) and the task folders (``tasks/<task>/``) are the
exception by design: each repeats its kind's template (``backend.py``, ``suts.py``,
``convert.py`` ...; ``definition.py``, ``scoring.py`` ...). They are compared with nothing among
themselves, but no module outside them may take one of their names either.

The command-line verbs (``quantmark/commands/<verb>.py``) are named after their verb, a naming
convention like the template's: ``commands/run.py`` beside the package ``quantmark.run`` and
``commands/diagnose.py`` beside the frameworks' ``diagnose.py`` are expected. A verb module still
may not share its name with any other module."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT


def _parts() -> dict[str, Path]:
    """Each part of the installed ``quantmark`` and the repository folder it comes from, as
    setup.py maps them (its ``PARTS``: ``sut/`` is ``quantmark.sut`` ...)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PARTS":
            parts = ast.literal_eval(node.value)
            break
    else:
        raise AssertionError("setup.py has no PARTS")
    return {"quantmark": ROOT / "quantmark", **{f"quantmark.{p}": ROOT / p for p in parts}}


def _verb_modules() -> dict[str, str]:
    """The verb modules of ``quantmark/commands/`` (a top-level ``NAME`` and
    ``add_arguments``, as ``quantmark.commands.verbs`` finds them): dotted module -> its
    ``NAME``."""
    verbs = {}
    for path in sorted((ROOT / "quantmark" / "commands").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)}
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        if "NAME" in names and "add_arguments" in functions:
            verbs[f"quantmark.commands.{path.stem}"] = ast.literal_eval(names["NAME"])
    return verbs


def _framework_folders() -> list[Path]:
    """The framework folders (``sut/<framework>/``) and the task folders (``tasks/<task>/``):
    each folder of a kind repeats its kind's template (``definition.py``, ``scoring.py`` ...)."""
    return [d for part in ("sut", "tasks") for d in sorted((ROOT / part).iterdir())
            if (d / "__init__.py").is_file()]


def _inventory() -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """File name -> dotted modules, for modules outside and inside the framework folders, and
    package name -> dotted packages."""
    modules: dict[str, list[str]] = defaultdict(list)
    framework: dict[str, list[str]] = defaultdict(list)
    packages: dict[str, list[str]] = defaultdict(list)
    folders = _framework_folders()
    for dotted, base in _parts().items():
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts or not (path.parent / "__init__.py").is_file():
                continue
            name = ".".join([dotted, *path.relative_to(base).with_suffix("").parts])
            if path.name == "__init__.py":
                package = name.removesuffix(".__init__")
                packages[package.rsplit(".", 1)[-1]].append(package)
            elif any(folder in path.parents for folder in folders):
                framework[path.stem].append(name)
            else:
                modules[path.stem].append(name)
    return modules, framework, packages


def test_the_inventory_sees_the_installed_layout():
    modules, framework, packages = _inventory()
    assert modules["cli"] == ["quantmark.cli"]
    assert "quantmark.sut.registry" in modules["registry"]
    assert "quantmark.sut.onnxruntime.backend" in framework["backend"]
    assert "quantmark.ground" in packages["ground"]
    assert "quantmark.commands.run" in modules["run"] and "quantmark.run" in packages["run"]
    assert _verb_modules()["quantmark.commands.train_bench"] == "train-bench"


def test_no_two_modules_share_a_name():
    modules, _, _ = _inventory()
    shared = {name: where for name, where in modules.items() if len(where) > 1}
    assert not shared, f"modules sharing a file name (rename one): {shared}"


def _not_verbs(modules: dict[str, list[str]]) -> dict[str, list[str]]:
    verbs = _verb_modules()
    kept = {name: [m for m in where if m not in verbs] for name, where in modules.items()}
    return {name: where for name, where in kept.items() if where}


def test_no_module_is_named_like_a_package():
    modules, _, packages = _inventory()
    modules = _not_verbs(modules)
    clash = {name: modules[name] + packages[name] for name in modules if name in packages}
    assert not clash, f"modules named like a package (rename the module): {clash}"


def test_no_module_takes_a_framework_folders_name():
    modules, framework, _ = _inventory()
    modules = _not_verbs(modules)
    clash = {name: modules[name] + framework[name] for name in modules if name in framework}
    assert not clash, f"modules named like a framework folder's template module: {clash}"


def test_a_verb_module_is_named_after_its_verb():
    verbs = _verb_modules()
    assert {"run", "sweep", "report", "diagnose", "train-bench"} <= set(verbs.values())
    misnamed = {module: verb for module, verb in verbs.items()
                if module.rsplit(".", 1)[-1] != verb.replace("-", "_")}
    assert not misnamed, f"verb modules not named after their verb: {misnamed}"
