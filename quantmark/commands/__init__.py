"""quantmark's command-line verbs, one module each, named after its verb (``train-bench`` is
``train_bench.py``), the way pytest's plugins each declare their own options.

A verb module has ``NAME`` (the word on the command line), ``HELP`` (one line) and
``add_arguments(parser)`` (its flags; the groups several verbs share come from ``options``),
and the job the flags describe. What the Python API answers (``quantmark.api.command_line``)
the command line runs through the API; the rest is the verb's ``main(args) -> int`` (the exit
code). It may add ``DESCRIPTION`` for its ``--help``.
They are found here, not listed: a new verb is one new module. A verb module imports only
what the lean install has at its top; heavy parts are imported when the verb runs.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def verbs() -> dict[str, ModuleType]:
    """Every verb module of this package, by its ``NAME``, in module order."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "add_arguments"):
            found[module.NAME] = module
    return found
