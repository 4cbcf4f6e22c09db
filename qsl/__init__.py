"""Data side of quantmark: datasets, preprocessing cache, calibration sets and the LoadGen QSL."""

from __future__ import annotations

from .calibration_sets import CalibrationSet, calibration_for
from .imagenet import ImageFolderDataset
from .library import QuerySampleLibrary, SampleNotLoadedError
from .preprocess import PreprocessRecipe, decode_and_crop, normalise

__all__ = [
    "CalibrationSet",
    "ImageFolderDataset",
    "PreprocessRecipe",
    "QuerySampleLibrary",
    "SampleNotLoadedError",
    "calibration_for",
    "decode_and_crop",
    "normalise",
    "open_dataset",
]


def open_dataset(path: str | None) -> ImageFolderDataset:
    """An ImageNet-format folder, or the built-in offline dataset when ``path`` is None."""
    if path is None:
        from .builtin import builtin_dataset_root

        return ImageFolderDataset(builtin_dataset_root(), builtin=True)
    return ImageFolderDataset(path)
