"""Data side of quantmark: datasets, preprocessing cache, calibration sets and the LoadGen QSL."""

from __future__ import annotations

from quantmark.ground.errors import UserError

from .calibration_sets import CalibrationSet, calibration_for
from .imagenet import ImageFolderDataset
from .label_space import check_classes
from .library import QuerySampleLibrary, SampleNotLoadedError
from .preprocess import PreprocessRecipe, decode_and_crop, normalise

__all__ = [
    "CalibrationSet",
    "ImageFolderDataset",
    "PreprocessRecipe",
    "QuerySampleLibrary",
    "SampleNotLoadedError",
    "calibration_for",
    "check_classes",
    "decode_and_crop",
    "normalise",
    "open_dataset",
]


def open_dataset(path: str | None, labels: str | None = None, builtin: str = "photos"
                 ) -> ImageFolderDataset:
    """A dataset folder (val_map.txt or one folder per class), or when ``path`` is None the
    built-in dataset ``builtin`` names ("photos" or "digits"); ``labels`` is a labels file
    naming the classes in the model's output order."""
    if path is not None:
        return ImageFolderDataset(path, labels)
    if builtin == "digits":
        from .digits_split import digits_dataset_root, digits_description  # made on first use

        dataset = ImageFolderDataset(digits_dataset_root(), labels, builtin=True)
        dataset.description = digits_description()
        return dataset
    if builtin != "photos":
        raise UserError(f"unknown built-in dataset {builtin!r}; choose photos or digits")
    from .builtin import builtin_dataset_root

    return ImageFolderDataset(builtin_dataset_root(), labels, builtin=True)
