"""Preprocessing named, not implied: presets, a recipe file, and flags, applied to a model spec.

A model's preprocessing is the rule that brings a photo to its input size (``short-side``: resize
the short side, centre-crop, as ImageNet evaluation does; ``stretch``: resize to exactly the input
size, as CIFAR-style training scripts do; ``letterbox``: fit inside the input size keeping the
aspect ratio, grey padding, as YOLO detectors take images), the mean and std (0-255 pixel units, or
0-1 units with ``scale = 255``), and the channel order. The built-in models' recipes are presets
under their own names, beside the conventions most models were trained with. The run's recipe is
kept as plain data in ``RunConfig.preprocess`` (the file is read once, by the parent), so every
child process, sweep cell and fleet node applies the same one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.models.zoo import MODELS, TF_UNIT, TORCHVISION_MEAN, TORCHVISION_STD, ModelSpec
from quantmark.qsl.preprocess import CHANNEL_ORDERS, RESIZE_RULES

#: the keys a recipe (file, flags) may set
KEYS = ("preset", "resize", "resize_short", "mean", "std", "scale", "channel_order")
IMAGENET_RATIO = 256 / 224  # short side over crop in ImageNet evaluation
PIXEL_MAX = 255.0  # a mean in pixel units lies in 0..255

#: conventions by name: resize rule, crop ratio, mean, std (0-255 units), channel order
CONVENTIONS: dict[str, dict[str, Any]] = {
    "imagenet": {"resize": "short-side", "ratio": IMAGENET_RATIO, "mean": TORCHVISION_MEAN,
                 "std": TORCHVISION_STD, "channel_order": "RGB"},
    "inception": {"resize": "short-side", "ratio": 1 / 0.875, "mean": TF_UNIT, "std": TF_UNIT,
                  "channel_order": "RGB"},
    "caffe": {"resize": "short-side", "ratio": IMAGENET_RATIO, "mean": (103.94, 116.78, 123.68),
              "std": (1.0, 1.0, 1.0), "channel_order": "BGR"},
    "cifar10": {"resize": "stretch", "ratio": 1.0,
                "mean": (125.307, 122.961, 113.8575), "std": (62.993, 62.089, 66.705),
                "channel_order": "RGB"},
    "unit": {"resize": "stretch", "ratio": 1.0, "mean": (0.0,), "std": (255.0,),
             "channel_order": "RGB"},
    "raw": {"resize": "stretch", "ratio": 1.0, "mean": (0.0,), "std": (1.0,),
            "channel_order": "RGB"},
}


def preset_names() -> list[str]:
    return [*CONVENTIONS, *MODELS]


def preset(name: str) -> dict[str, Any]:
    """A named recipe: a convention, or a built-in model's own."""
    if name in CONVENTIONS:
        return dict(CONVENTIONS[name])
    if name in MODELS:
        spec = MODELS[name]
        return {"resize": spec.resize_rule, "ratio": spec.resize_short / spec.input_size,
                "mean": spec.mean, "std": spec.std, "channel_order": spec.channel_order}
    raise UserError(f"--preprocess {name!r} is neither a preset nor a recipe file; choose one "
                    f"of {', '.join(preset_names())}, or pass a .json/.toml file")


def read_recipe_file(path: str) -> dict[str, Any]:
    """A recipe file's keys (JSON, or TOML on Python 3.11+), checked like flags."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--preprocess {path}: cannot read it ({type(exc).__name__}); pass a "
                        "readable .json or .toml recipe file") from None
    try:
        if file.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except ImportError:
        raise UserError(f"--preprocess {path}: TOML needs Python 3.11+; write it as JSON") \
            from None
    except ValueError as exc:
        raise UserError(f"--preprocess {path} is not valid {file.suffix.lstrip('.') or 'JSON'}"
                        f" ({str(exc).splitlines()[0][:120]}); fix the file") from None
    if not isinstance(data, dict):
        raise UserError(f"--preprocess {path}: expected a table of keys ({', '.join(KEYS)})")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UserError(f"--preprocess {path}: unknown key {unknown[0]!r}; the keys are "
                        f"{', '.join(KEYS)}")
    return data


def recipe_data(value: str | None, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The run's recipe as plain data: ``--preprocess`` (a preset name or a file's keys), then
    the flags given (which win). Checked here, so a bad value is one line before any run."""
    data: dict[str, Any] = {}
    if value:
        is_file = value.endswith((".json", ".toml")) or Path(value).is_file()
        data.update(read_recipe_file(value) if is_file else {"preset": value})
    data.update({k: v for k, v in flags.items() if v not in (None, "")})
    check(data)
    return data


def _numbers(key: str, value: Any) -> tuple[float, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        items = [items]
    try:
        numbers = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        numbers = ()
    if not numbers or not all(math.isfinite(n) for n in numbers) or len(numbers) not in (1, 3):
        raise UserError(f"{key} {value!r}: give 1 or 3 numbers, e.g. --{key} 0.5,0.5,0.5")
    if key == "std" and any(n == 0 for n in numbers):
        raise UserError(f"std {value!r}: a std of 0 divides by zero; give positive values")
    if key == "std" and any(n < 0 for n in numbers):
        raise UserError(f"std {value!r}: a negative std flips the channel's sign (no "
                        "training pipeline does); give positive values")
    return numbers


def _check_mean(value: Any, scale: float) -> None:
    """A mean is a pixel value: in pixel units (0-255, or 0-1 with ``scale`` 255) it lies
    within the pixels' range, else it is a typo (a sign, a unit)."""
    top = PIXEL_MAX / scale
    if any(not 0 <= n <= top for n in _numbers("mean", value)):
        units = "0-255 pixel units" if scale == 1 else f"0-{top:g} units with scale {scale:g}"
        raise UserError(f"mean {value!r}: a channel's mean lies within the pixels' range "
                        f"({units}); fix the value or its units (--scale 255: 0-1 units)")


def check(data: Mapping[str, Any]) -> None:
    """Every value a recipe holds is usable: one line naming the key and the fix otherwise."""
    if "preset" in data:
        preset(str(data["preset"]))
    if "resize" in data and data["resize"] not in RESIZE_RULES:
        raise UserError(f"resize {data['resize']!r}: choose {' or '.join(RESIZE_RULES)}")
    if "channel_order" in data and str(data["channel_order"]).upper() not in CHANNEL_ORDERS:
        raise UserError(f"channel order {data['channel_order']!r}: choose RGB or BGR")
    for key in ("resize_short", "scale"):
        if key in data:
            try:
                ok = float(data[key]) > 0 and math.isfinite(float(data[key])) \
                    and not isinstance(data[key], bool)
            except (TypeError, ValueError):
                ok = False
            if ok and key == "resize_short":
                ok = float(data[key]) == int(float(data[key]))
            if not ok:
                what = ("a positive number of pixels (a whole one)" if key == "resize_short"
                        else "a positive number")
                raise UserError(f"{key.replace('_', '-')} {data[key]!r}: give {what}, e.g. "
                                f"{'256' if key == 'resize_short' else '255'}")
    if "std" in data:
        _numbers("std", data["std"])
    if "mean" in data:
        _check_mean(data["mean"], float(data.get("scale", 1.0)))


def apply(spec: ModelSpec, data: Mapping[str, Any], *, default: str | None = None) -> ModelSpec:
    """``spec`` with the recipe applied: its preset (or ``default``, a convention for a model
    quantmark does not know), then each key given. The geometry follows the spec's input size:
    a preset's crop ratio sets the short side."""
    base = data.get("preset") or default
    recipe = preset(str(base)) if base else None
    ratio = spec.resize_short / spec.input_size
    changes: dict[str, Any] = {}
    if recipe is not None:
        ratio = recipe["ratio"]
        changes.update(resize_rule=recipe["resize"], mean=tuple(recipe["mean"]),
                       std=tuple(recipe["std"]), channel_order=recipe["channel_order"])
    if "resize" in data:
        changes["resize_rule"] = data["resize"]
    scale = float(data.get("scale", 1.0))
    for key in ("mean", "std"):
        if key in data:
            changes[key] = tuple(n * scale for n in _numbers(key, data[key]))
    if "channel_order" in data:
        changes["channel_order"] = str(data["channel_order"]).upper()
    short = (int(data["resize_short"]) if "resize_short" in data
             else max(spec.input_size, spec.input_width, round(min(spec.input_size,
                                                                   spec.input_width) * ratio)))
    changes["resize_short"] = short
    _check_crop(changes.get("resize_rule", spec.resize_rule), short, spec)
    return replace(spec, **changes)


def _check_crop(rule: str, short: int, spec: ModelSpec) -> None:
    """The short-side rule crops the input size out of the resized image: a short side below
    it leaves nothing to crop (the child's recipe would fail after the model was built)."""
    need = max(spec.input_size, spec.input_width)
    if rule == "short-side" and short < need:
        raise UserError(f"--resize-short {short} is below the input size "
                        f"{spec.input_size}x{spec.input_width}: the centre crop needs a short "
                        f"side of at least {need}; pass --resize-short {need} or more, or "
                        "--resize stretch")


def describe(spec: ModelSpec) -> str:
    """The recipe in words, as a run states it."""
    size = f"{spec.input_size}x{spec.input_width}"
    rule = (f"stretch to {size}" if spec.resize_rule == "stretch" else
            f"letterbox to {size} (aspect kept, grey 114 padding)"
            if spec.resize_rule == "letterbox"
            else f"short side to {spec.resize_short}, centre crop {size}")
    if spec.input_dtype == "uint8":
        norm = "raw uint8 pixels"
    else:
        norm = (f"mean {', '.join(f'{m:g}' for m in spec.mean)}, "
                f"std {', '.join(f'{s:g}' for s in spec.std)}")
    channels = "grayscale" if spec.channels == 1 else spec.channel_order
    return f"{rule}, {norm}, {channels}"
