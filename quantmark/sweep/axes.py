"""What a sweep's models run at and on: input size and dataset as dimensions, and the model
settings every cell shares with run.py (class count, preprocessing recipe, labels).

Input size and dataset are dimensions: ``--image-sizes 64,128,224`` and ``--datasets
DIR1,DIR2`` (sweep file keys ``image_sizes`` and ``datasets``) run each model x SUT once per
value, as ``batch_sizes`` does.

A cell records its size and dataset, and its id and folder carry them on the model part
(``resnet50+size=128+data=flowers/ort-int8/Offline-b8-r1``), so cells of two sizes or datasets
never share a run folder, a manifest entry or a report row. A cell at a built-in model's own size
carries no size, and a sweep with ``--dataset-path`` (one dataset) no dataset: a sweep without
the new flags has exactly the cells it had before, and adding ``--image-sizes`` to a finished
sweep reuses its cells at the model's own size.

A text model's sequence length is the same kind of dimension (``--seq-lens``:
``quantmark.sweep.lengths``), and the one a text model has instead of a size.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError
from quantmark.ground.paths import path_problem
from quantmark.sweep import lengths

if TYPE_CHECKING:
    from quantmark.sweep.spec import SweepSpec

_SIZE = re.compile(r"(\d+)(?:\s*[xX]\s*(\d+))?")
SIZES_FLAG = "--image-sizes (image_sizes in a sweep file)"
DATASETS_FLAG = "--datasets (datasets in a sweep file)"
#: the recipe flags of ``options.model_shape``, by their keys in a recipe
RECIPE_FLAGS = ("resize", "resize_short", "mean", "std", "scale", "channel_order")
SIZES_FIX = ("give sizes in pixels, S or HxW (height x width), e.g. --image-sizes 64,128,224x320 "
             "or image_sizes = [64, \"224x320\"]")


def size_text(height: int, width: int) -> str:
    """How a size is written in a cell, its id and its run: ``128``, or ``224x320``."""
    return str(height) if height == width else f"{height}x{width}"


def parse_size(value: Any, where: str = SIZES_FLAG) -> str:
    """One image size as a cell records it (``128``, ``128x128`` -> ``128``; ``224x320``); a
    value that is no size is one line naming ``where`` and the fix."""
    text = str(value).strip()
    found = None if isinstance(value, bool | float) else _SIZE.fullmatch(text)
    if not found or int(found[1]) < 1 or (found[2] is not None and int(found[2]) < 1):
        raise UserError(f"{where} {text!r} is not an image size; {SIZES_FIX}")
    return size_text(int(found[1]), int(found[2] or found[1]))


def _items(raw: Any) -> list[Any]:
    """A flag's "a,b" or a file's value or list, as its items."""
    if isinstance(raw, str):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return list(raw) if isinstance(raw, list | tuple) else [raw]


def image_sizes(raw: Any) -> list[str]:
    """The sweep's sizes, each checked and written one way, in the order given; ``[]`` (the
    models' own sizes) when not given."""
    if raw is None:
        return []
    sizes = [parse_size(item) for item in _items(raw)]
    if not sizes:
        raise UserError(f"{SIZES_FLAG}: the list is empty; {SIZES_FIX}")
    return list(dict.fromkeys(sizes))


def datasets(raw: Any) -> list[str]:
    """The sweep's dataset folders, each an existing folder, as absolute paths; ``[]`` when not
    given. Two folders of one name are refused: a cell's id carries the folder's name."""
    if raw is None:
        return []
    folders: dict[str, str] = {}
    for item in _items(raw):
        folder = Path(str(item)).expanduser()
        problem = path_problem(folder, "folder")
        if problem is not None:
            raise UserError(f"{DATASETS_FLAG}: dataset folder {item} {problem}; give existing "
                            "dataset folders, e.g. --datasets DIR1,DIR2")
        absolute = str(folder.resolve())
        name = Path(absolute).name
        if folders.get(name, absolute) != absolute:
            raise UserError(f"{DATASETS_FLAG}: {folders[name]} and {absolute} are both named "
                            f"{name}, and a cell's id carries the folder's name; give one of "
                            "them another name (a renamed copy or a symlink)")
        folders[name] = absolute
    if not folders:
        raise UserError(f"{DATASETS_FLAG}: the list is empty; give dataset folders, e.g. "
                        "--datasets DIR1,DIR2")
    return list(folders.values())


def own_size(model: str, model_path: str | None) -> str | None:
    """A built-in model's own input size as a cell writes it; None for a model file, whose own
    size is the file's (its cells always carry the size they ask for)."""
    if model_path:
        return None
    spec = model_spec(model)
    return size_text(spec.input_size, spec.input_width)


def model_spec(model: str, **fields: Any) -> Any:
    """A model's spec as its runs resolve it, through its task (a built-in classifier is its
    zoo entry; another task's model, a detector, is its task's to read); ``fields``: the
    RunConfig fields that shape it (model_path, input_size ...)."""
    from quantmark.ground.config import RunConfig
    from quantmark.models.zoo import MODELS, get_model
    from quantmark.tasks.catalog import task_for

    if model in MODELS and not fields.get("model_path") and not fields.get("input_size"):
        return get_model(model)
    config = RunConfig(scenario="Offline", sut="", model=model, **fields)
    return task_for(config).resolve_spec(config)


def cell_sizes(sizes: list[str], model: str, model_path: str | None) -> list[str]:
    """The sizes ``model``'s cells run at: ``""`` for its own size (and when none is given)."""
    own = own_size(model, model_path) if sizes else None
    return list(dict.fromkeys("" if size == own else size for size in sizes)) or [""]


def suffix(input_size: str, dataset: str, seq_len: int = 0) -> str:
    """What a cell's size (or a text model's sequence length) and dataset add to its model in
    its id and folder: ``+size=128+data=flowers``, ``+seq=32`` (nothing at the model's own
    size or length and the one dataset)."""
    return (f"+size={input_size}" if input_size else "") + lengths.suffix(seq_len) + \
        (f"+data={Path(dataset).name}" if dataset else "")


def pixels(size: str) -> int:
    """Height x width of a size as cells write it: the one to check memory against."""
    height, _, width = size.partition("x")
    return int(height) * int(width or height)


def recipe(settings: dict[str, Any]) -> dict[str, Any]:
    """The run's preprocessing recipe as data (``RunConfig.preprocess``): the file's
    ``preprocess`` (a preset, a recipe file, or a table of recipe keys), then the flags a
    sweep shares with run.py (``options.model_shape``: ``--mean``, ``--resize`` ...), checked
    as run.py checks them."""
    from quantmark.models import preprocessing

    raw = settings.get("preprocess")
    flags = {key: settings[key] for key in RECIPE_FLAGS if settings.get(key) not in (None, "")}
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - set(preprocessing.KEYS))
        if unknown:
            raise UserError(f"preprocess: unknown key {unknown[0]!r}; the keys are "
                            f"{', '.join(preprocessing.KEYS)}")
        data = {**raw, **flags}
        preprocessing.check(data)
        return data
    return preprocessing.recipe_data(str(raw), flags) if raw or flags else {}


def check(spec: SweepSpec) -> None:
    """One dataset or several, not both; sizes and datasets are single models' dimensions;
    a class count a classifier can have."""
    if spec.datasets and spec.dataset_path:
        raise UserError("--datasets and --dataset-path both name the dataset: give several "
                        "with --datasets DIR1,DIR2, or one with --dataset-path DIR")
    if spec.ensembles and (spec.image_sizes or spec.datasets):
        raise UserError("--image-sizes and --datasets sweep single models, and an ensemble's "
                        "members run at their own sizes on one dataset: sweep the ensemble "
                        "in its own sweep (with --dataset-path), or drop --ensemble")
    if spec.num_classes == 1:
        raise UserError("--num-classes 1: give 2 or more (0: the model's own)")


def sized_specs(spec: SweepSpec, model: str) -> list[Any]:
    """``model`` at each size (or sequence length) it sweeps, as its runs will resolve it (a
    model file that takes another size, a size the recipe cannot take: one line now, not a
    failed cell per size)."""
    from quantmark.models.zoo import MODELS, get_model

    found = []
    for size in cell_sizes(spec.image_sizes, model, spec.model_path):
        for seq_len in lengths.cell_seq_lens(spec.seq_lens):
            if not size and not seq_len and model in MODELS:
                found.append(get_model(model))
                continue
            try:
                found.append(model_spec(model, model_path=spec.model_path, input_size=size,
                                        num_classes=spec.num_classes,
                                        preprocess=dict(spec.preprocess), labels=spec.labels,
                                        seq_len=seq_len, padding=spec.padding,
                                        tokenizer=spec.tokenizer))
            except UserError as exc:
                where = (f"image size {size} ({SIZES_FLAG}): " if size else
                         f"sequence length {seq_len} ({lengths.SEQ_LENS_FLAG}): " if seq_len
                         else "")
                raise UserError(f"{where}{exc}") from None
    return found
