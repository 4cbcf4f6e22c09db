"""ImageNet-style preprocessing, split so the expensive part is cached and the cheap part is not.

``decode_and_crop`` (decode, resize, centre crop) is slow and depends only on the *geometry* of a
recipe, so its uint8 output is cached once per dataset and shared by every model with the same
geometry. ``normalise`` (mean/std, layout) is a cheap vectorised pass done at load time, so models
that differ only in mean/std (e.g. torchvision vs. TF-Lite style) reuse one cache.

Resampling: PIL bilinear (``Image.Resampling.BILINEAR``). This is what torchvision's
``Resize(256)`` does on PIL images and what the MLPerf ResNet-50 PyTorch reference used; PIL
antialiases when downscaling, so the crop is not aliased the way OpenCV's INTER_LINEAR can be.
Changing it changes accuracy slightly, so it is part of the geometry key.

Orientation: a photo's EXIF orientation (a camera held sideways) is applied before the resize,
as image viewers and OpenCV's ``imread`` (MLPerf's ResNet-50 reference) do, for every SUT alike;
it is part of the geometry key (GEOMETRY_VERSION 3). Images above Pillow's decompression-bomb
warning size (about 89 Mpixels) are decoded with one log line naming the file; above its hard
limit (twice that) they are refused, naming the limit and the fix.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from PIL import ExifTags, Image, ImageOps

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_json

# Bump when the decode/resize/crop code changes in a way that changes pixels: old caches go stale.
# 2: 16-bit grayscale is scaled to 8 bits, no longer clipped to white.
# 3: EXIF orientation is applied (a rotated photo is decoded upright).
GEOMETRY_VERSION = 3
RESAMPLING = "bilinear"
_PIL_RESAMPLING = Image.Resampling.BILINEAR

Layout = Literal["NCHW", "NHWC"]
log = logging.getLogger(__name__)

# torchvision / MLPerf ResNet-50 PyTorch constants, in 0-255 pixel units.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


@dataclass(frozen=True)
class PreprocessRecipe:
    """How a model wants its images: geometry (cached) plus normalisation (applied at load).

    ``mean``/``std`` are RGB in 0-255 pixel units: ``out = (pixel - mean) / std``.
    """

    resize_short: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    layout: Layout = "NCHW"

    def __post_init__(self) -> None:
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', not {self.layout!r}")
        if not 0 < self.crop <= self.resize_short:
            raise ValueError(f"crop {self.crop} must be in 1..resize_short ({self.resize_short})")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s == 0 for s in self.std):
            raise ValueError("mean and std must be 3 RGB values, std non-zero")
        # Normalise to plain float tuples so equal recipes hash equally (lists, ints, numpy).
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))

    def geometry_key(self) -> str:
        """Key of what the uint8 cache depends on; mean/std/layout excluded on purpose."""
        return hash_json(
            {
                "resize_short": self.resize_short,
                "crop": self.crop,
                "resampling": RESAMPLING,
                "version": GEOMETRY_VERSION,
            }
        )

    def key(self) -> str:
        """Key of the full recipe (what the float32 tensors depend on)."""
        return hash_json({"geometry": self.geometry_key(), **asdict(self)})


def resized_size(width: int, height: int, resize_short: int) -> tuple[int, int]:
    """(w, h) after scaling the short side to ``resize_short``, keeping aspect (torchvision)."""
    if width <= height:
        return resize_short, int(resize_short * height / width)
    return int(resize_short * width / height), resize_short


def crop_box(width: int, height: int, crop: int) -> tuple[int, int, int, int]:
    """Centre-crop box, rounded like torchvision's ``CenterCrop``."""
    left = int(round((width - crop) / 2.0))
    top = int(round((height - crop) / 2.0))
    return left, top, left + crop, top + crop


# 16-bit grayscale as Pillow opens it (PNG, TIFF, PGM); its convert("RGB") would clip to 255.
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB of any image Pillow decodes, high bit depths scaled rather than clipped.

    16-bit RGB(A) PNGs Pillow already reduces to their high byte; 16-bit grayscale it keeps
    as 16-bit integers, so they are reduced here the same way (v >> 8: 257 * v8 gives v8 back).
    32-bit integer or float pixels (some TIFFs) have no agreed range: they are refused.
    """
    mode = img.mode
    if mode in _SIXTEEN_BIT or (mode == "I" and img.format == "PNG"):  # older Pillow: "I"
        wide = np.asarray(img).astype(np.uint32)
        return Image.fromarray((np.minimum(wide, 65535) >> 8).astype(np.uint8), "L").convert("RGB")
    if mode in ("I", "F") or mode.startswith("I;"):
        raise UserError(
            f"image has pixels of mode {mode} (32-bit integer, float or signed: no known "
            "range); save it as 8- or 16-bit RGB or grayscale (PNG or JPEG)"
        )
    return img.convert("RGB")


def open_image(path: str | os.PathLike) -> Image.Image:
    """``Image.open`` with Pillow's decompression-bomb guard said in one line: a large image is
    decoded with a log line naming it; one above Pillow's hard limit is a UserError."""
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(path)
        except Image.DecompressionBombError:
            raise UserError(f"image {path} has more than {2 * limit} pixels, Pillow's limit "
                            "against decompression bombs; downscale it (its short side is "
                            "resized to a few hundred pixels anyway)") from None
    if limit and img.width * img.height > limit:
        log.warning("image %s is %dx%d, above Pillow's decompression-bomb warning size of %d "
                    "pixels: decoded anyway (downscale it to save memory and time)",
                    path, img.width, img.height, limit)
    return img


def upright(img: Image.Image) -> Image.Image:
    """The image as it is meant to be seen: its EXIF orientation (rotated, mirrored) applied.
    Most images have none, and are returned as they are (no copy)."""
    if img.getexif().get(ExifTags.Base.Orientation, 1) in range(2, 9):
        return ImageOps.exif_transpose(img)
    return img


def decode_and_crop(path: str | os.PathLike, recipe: PreprocessRecipe) -> np.ndarray:
    """Decode an image to upright RGB, resize its short side, centre crop: uint8
    (crop, crop, 3)."""
    with open_image(path) as img:
        img = to_rgb(upright(img))
        size = resized_size(img.width, img.height, recipe.resize_short)
        img = img.resize(size, _PIL_RESAMPLING)
        img = img.crop(crop_box(size[0], size[1], recipe.crop))
        out = np.asarray(img, dtype=np.uint8)
    if out.shape != (recipe.crop, recipe.crop, 3):  # pragma: no cover - PIL contract
        raise ValueError(f"{path}: unexpected crop shape {out.shape}")
    return out


def normalise(images: np.ndarray, recipe: PreprocessRecipe) -> np.ndarray:
    """uint8 HWC image or NHWC batch -> float32 ``(x - mean) / std`` in the recipe's layout.

    One vectorised pass per channel that writes straight into the output layout, so NCHW needs
    no separate transpose copy and no float64 temporaries.
    """
    arr = np.asarray(images)
    single = arr.ndim == 3
    if single:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"expected (H, W, 3) or (N, H, W, 3) images, got shape {arr.shape}")
    n, h, w, _ = arr.shape
    scale = [1.0 / s for s in recipe.std]
    if recipe.layout == "NCHW":
        out = np.empty((n, 3, h, w), dtype=np.float32)
        for c in range(3):
            dst = out[:, c]
            np.subtract(arr[..., c], np.float32(recipe.mean[c]), out=dst, dtype=np.float32)
            dst *= np.float32(scale[c])
    else:
        out = np.empty((n, h, w, 3), dtype=np.float32)
        np.subtract(arr, np.asarray(recipe.mean, np.float32), out=out, dtype=np.float32)
        out *= np.asarray(scale, np.float32)
    return out[0] if single else out


def recipe_for(spec: Any, layout: str) -> PreprocessRecipe:
    """A model's preprocessing (its ``ModelSpec``: resize, crop, mean/std) in ``layout``."""
    return PreprocessRecipe(resize_short=spec.resize_short, crop=spec.input_size,
                            mean=tuple(spec.mean), std=tuple(spec.std), layout=layout)
