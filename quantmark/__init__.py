"""quantmark: MLPerf-style inference benchmarking across frameworks and precisions.

Installed, this is the only top-level package: the repository's ``sut/``, ``qsl/``,
``scenarios/``, ``models/``, ``report/``, ``audit/``, ``submission/`` and ``bench/`` folders are
its parts ``quantmark.sut`` ... (setup.py maps them). ``quantmark.ground`` is what every part
stands on; the jobs here (run, sweep, train, diagnosis) and the commands sit on top.

As a library (``quantmark.api.public``)::

    import quantmark as qm
    r = qm.run(scenario="Offline", sut="ort-int8", model="digits-cnn")
    print(r.figure, r.interval, r.valid)

``__all__`` is the public surface, listed once; CHANGELOG.md's "Public API" section names the
same names (a test keeps the two equal, so no name changes without a note). The calls are
imported on first use: ``import quantmark`` stays as light as before.
"""

from __future__ import annotations

import types
from typing import Any

from quantmark.ground.errors import QuantmarkError, SutError, UserError
from quantmark.ground.version import VERSION as __version__

#: the calls, each from ``quantmark.api.public``
_CALLS = ("run", "compare", "sweep", "history", "regress", "recommend", "profile", "diagnose")
#: the answers they return, from ``quantmark.api.results``
_RESULTS = ("RunResult", "Comparison", "SweepResult", "History", "Regression", "Recommendation")

__all__ = ["QuantmarkError", "SutError", "UserError", "__version__", *_CALLS, *_RESULTS]


class _CallablePackage(types.ModuleType):
    """A subpackage whose name is also a call: ``quantmark.run`` is the package of a run's
    jobs and ``quantmark.run(...)`` the API's call. Python binds a subpackage to its name in
    ``quantmark`` when it is imported, so a function of that name would be replaced by the
    package as soon as anything imported it; the package is made callable instead."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from quantmark.api import public

        return getattr(public, self.__name__.rsplit(".", 1)[1])(*args, **kwargs)


def _callable_packages() -> None:
    from quantmark import recommend, run, sweep  # docstrings: importing them costs nothing

    for package in (run, sweep, recommend):
        package.__class__ = _CallablePackage


_callable_packages()


def __getattr__(name: str) -> Any:
    """The API's calls and result types, imported when first used."""
    if name in _CALLS:
        from quantmark.api import public

        return getattr(public, name)
    if name in _RESULTS:
        from quantmark.api import results

        return getattr(results, name)
    raise AttributeError(f"module 'quantmark' has no attribute {name!r}")
