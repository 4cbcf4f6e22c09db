"""quantmark: MLPerf-style inference benchmarking across frameworks and precisions.

Installed, this is the only top-level package: the repository's ``sut/``, ``qsl/``,
``scenarios/``, ``models/``, ``report/``, ``audit/``, ``submission/`` and ``bench/`` folders are
its parts ``quantmark.sut`` ... (setup.py maps them). ``quantmark.ground`` is what every part
stands on; the jobs here (run, sweep, train, diagnosis) and the commands sit on top.
"""

from quantmark.ground.version import VERSION as __version__

__all__ = ["__version__"]
