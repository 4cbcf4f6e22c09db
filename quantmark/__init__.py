"""quantmark: MLPerf-style inference benchmarking across frameworks and precisions.

This package is the shared bottom layer (errors, paths, hashing) plus the orchestration that
run.py dispatches to. Lower parts (sut/, qsl/, models/, scenarios/, report/) may import only
``quantmark.errors``, ``quantmark.paths`` and ``quantmark.hashing`` from here.
"""

__version__ = "0.1.0"
