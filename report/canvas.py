"""Figures drawn on a canvas of their own, never through pyplot: drawing a report inside a
user's notebook or script (``quantmark.sweep()`` writes one) must not switch matplotlib's
backend or leave figures in pyplot's list, and a figure freed with its last reference needs
no ``close``."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

#: the keyword arguments that shape the figure itself; the rest go to its axes grid
FIGURE_KEYS = ("figsize", "dpi", "layout", "constrained_layout", "facecolor")


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    """``pyplot.subplots`` without pyplot: a figure and its axes (an array for a grid)."""
    figure = Figure(**{key: kwargs.pop(key) for key in FIGURE_KEYS if key in kwargs})
    return figure, figure.subplots(nrows, ncols, **kwargs)
