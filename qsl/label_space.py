"""A dataset's label space: the class names a labels file gives, and whether they fit a model.

A labels file is one class name a line in the MODEL's output order (line 1 is class 0). It maps
a class-per-folder dataset's folder names onto the model's indices where the folders' sorted
order is not the model's, and names the integer labels of a ``val_map.txt``. The run writes the
names it scored against beside its own val_map.txt as ``classes.txt``, so the accuracy tool
knows the label space without the dataset. Every problem is one UserError line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text

#: the class names beside a run's val_map.txt, one a line in label order
CLASSES_FILE = "classes.txt"
BOM = "\ufeff"
LABELS_FORMAT = "one class name a line, in the model's output order"


def read_class_names(path: str | os.PathLike) -> list[str]:
    """The names of a labels file, line N being class N-1. Trailing blank lines are ignored; a
    blank line or a name given twice elsewhere would shift or merge classes, so both are
    refused naming the line."""
    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a folder, not a file" if file.is_dir() else "does not exist"
        raise UserError(f"labels file {file} {what}; pass --labels FILE with {LABELS_FORMAT}")
    try:
        text = file.read_bytes().decode("utf-8").removeprefix(BOM)
    except OSError as exc:
        raise UserError(f"labels file {file} cannot be read ({exc.strerror}); fix its "
                        "permissions") from None
    except UnicodeDecodeError:
        raise UserError(f"labels file {file} is not UTF-8 text; save it as UTF-8 with "
                        f"{LABELS_FORMAT}") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    names: list[str] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        name = raw.strip()
        if not name:
            raise UserError(f"{file}:{number}: blank line, which would shift every later "
                            f"class by one; remove it or name the class ({LABELS_FORMAT})")
        if name in first_line:
            raise UserError(f"{file}:{number}: class {_quoted(name)} is named again (first at "
                            f"line {first_line[name]}); name each class once")
        first_line[name] = number
        names.append(name)
    if not names:
        raise UserError(f"labels file {file} names no classes; write {LABELS_FORMAT}")
    return names


def check_classes(dataset: Any, model_classes: int, model_name: str) -> None:
    """Refuse, in one line, a dataset whose label space does not fit a model that predicts
    ``model_classes`` classes (after any background-class offset): scoring it would give a
    figure that looks like an accuracy and means nothing."""
    labels_path = getattr(dataset, "labels_path", None)
    if labels_path is not None:
        if len(dataset.classes) != model_classes:
            raise UserError(
                f"labels file {labels_path} names {len(dataset.classes)} classes but model "
                f"{model_name} has {model_classes}; pass the labels file of this model "
                f"({LABELS_FORMAT})")
        return
    if dataset.layout == "class-folders":
        if dataset.num_classes != model_classes:
            raise UserError(
                f"dataset {dataset.root} has {dataset.num_classes} class folders but model "
                f"{model_name} has {model_classes} classes; pass --labels FILE naming the "
                f"model's classes ({LABELS_FORMAT}), or the model trained on these "
                f"{dataset.num_classes} classes")
        return
    _check_val_map_labels(dataset, model_classes, model_name)


def _check_val_map_labels(dataset: Any, model_classes: int, model_name: str) -> None:
    """A bare val_map's labels must be classes of the model: the first one beyond is named."""
    labels = [label for _, label in dataset.all_items]
    beyond = next((row for row, label in enumerate(labels) if label >= model_classes), None)
    if beyond is None:
        return
    hint = (f" (labels 1..{model_classes} look 1-based: subtract 1 from each)"
            if min(labels) >= 1 and max(labels) == model_classes else "")
    raise UserError(
        f"{dataset.describe(beyond)}: label {labels[beyond]} is beyond model {model_name}'s "
        f"{model_classes} classes (0..{model_classes - 1}){hint}; pass the model trained on "
        "this dataset's labels, or a val_map.txt with the model's labels")


def write_classes(folder: str | os.PathLike, dataset: Any) -> None:
    """``classes.txt`` beside a run's val_map.txt when the dataset names its classes, so the
    accuracy tool (and a reader of accuracy.txt) knows what the labels are."""
    names = getattr(dataset, "classes", None)
    if names:
        atomic_write_text(Path(folder) / CLASSES_FILE, "".join(f"{name}\n" for name in names))


def _quoted(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
