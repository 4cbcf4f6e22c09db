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
it is part of the geometry key (GEOMETRY_VERSION 3). Detectors take a letterbox instead of a
crop (``letterbox_geometry``): the whole image scaled to fit, grey bars around it.

Images above Pillow's decompression-bomb warning size (about 89 Mpixels) are decoded with one
log line naming the file; above its hard limit (twice that) they are refused, naming the limit
and the fix.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
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
#: how an image reaches the model's height and width: scale the short side to ``resize_short``
#: and centre-crop (ImageNet evaluation), stretch it to exactly that size (CIFAR-style
#: training scripts, most fine-tuned detectors' classifiers), or letterbox it: scale it to fit
#: inside, aspect kept, and pad with grey (YOLO detectors: no object may be cropped away)
RESIZE_RULES = ("short-side", "stretch", "letterbox")
#: the letterbox's padding, the grey Ultralytics' YOLO models were trained with
LETTERBOX_PAD = (114, 114, 114)
CHANNEL_ORDERS = ("RGB", "BGR")
INPUT_DTYPES = ("float32", "uint8")
#: ITU-R 601-2 luma, the weights Pillow's convert("L") uses: a 1-channel model's input
LUMA = (0.299, 0.587, 0.114)
log = logging.getLogger(__name__)

# torchvision / MLPerf ResNet-50 PyTorch constants, in 0-255 pixel units.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


@dataclass(frozen=True)
class PreprocessRecipe:
    """How a model wants its images: geometry (cached) plus normalisation (applied at load).

    ``mean``/``std`` are in 0-255 pixel units, one per model channel in the model's channel
    order (one value for a 1-channel model): ``out = (pixel - mean) / std``. A ``uint8``
    model takes the pixels as they are (mean 0, std 1). The fields after ``layout`` default to
    the ImageNet convention, and only a recipe that changes them has them in its keys, so
    every existing cache keeps its key. ``resize_short`` only matters to the short-side rule;
    a letterbox recipe's geometry key leaves it out, so letterboxes of one size share a cache.
    """

    resize_short: int = 256
    crop: int = 224  # the model's input height (and width, unless crop_width is set)
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    layout: Layout = "NCHW"
    crop_width: int = 0  # 0: square, ``crop`` wide
    resize_rule: str = "short-side"
    channels: int = 3
    channel_order: str = "RGB"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', not {self.layout!r}")
        if self.resize_rule not in RESIZE_RULES:
            raise ValueError(f"resize rule must be one of {RESIZE_RULES}, not {self.resize_rule!r}")
        if self.channels not in (1, 3) or self.channel_order not in CHANNEL_ORDERS:
            raise ValueError("channels must be 1 or 3 and channel order RGB or BGR")
        if self.dtype not in INPUT_DTYPES:
            raise ValueError(f"input dtype must be one of {INPUT_DTYPES}, not {self.dtype!r}")
        if self.crop < 1 or self.crop_width < 0:
            raise ValueError(f"crop {self.crop}x{self.crop_width} must be positive")
        if self.resize_rule == "short-side" and not min(self.height, self.width) <= \
                self.resize_short:
            raise ValueError(f"crop {self.crop} must be in 1..resize_short ({self.resize_short})")
        if len(self.mean) not in (1, self.channels) or len(self.std) != len(self.mean) or \
                any(s == 0 for s in self.std):
            raise ValueError(f"mean and std must be {self.channels} values (one per channel) "
                             "or one, std non-zero")
        # Normalise to plain float tuples so equal recipes hash equally (lists, ints, numpy).
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))

    @property
    def height(self) -> int:
        return self.crop

    @property
    def width(self) -> int:
        return self.crop_width or self.crop

    def _changed(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The named fields that differ from their defaults (ImageNet recipes: none)."""
        defaults = PreprocessRecipe.__dataclass_fields__
        return {n: getattr(self, n) for n in names if getattr(self, n) != defaults[n].default}

    def geometry_key(self) -> str:
        """Key of what the uint8 cache depends on; normalisation and layout excluded on
        purpose."""
        letterboxed = self.resize_rule == "letterbox"
        return hash_json(
            {
                "resize_short": 0 if letterboxed else self.resize_short,
                "crop": self.crop,
                "resampling": RESAMPLING,
                "version": GEOMETRY_VERSION,
                **self._changed(("crop_width", "resize_rule")),
                **({"pad": list(LETTERBOX_PAD)} if letterboxed else {}),
            }
        )

    def key(self) -> str:
        """Key of the full recipe (what the float32 tensors depend on)."""
        base = {n: getattr(self, n) for n in ("resize_short", "crop", "mean", "std", "layout")}
        return hash_json({"geometry": self.geometry_key(), **base,
                          **self._changed(("crop_width", "resize_rule", "channels",
                                           "channel_order", "dtype"))})

    def input_shape(self, batch: int | None = None) -> tuple[int, ...]:
        """One sample's shape (or a batch's) as the model takes it."""
        one = ((self.channels, self.height, self.width) if self.layout == "NCHW"
               else (self.height, self.width, self.channels))
        return one if batch is None else (batch, *one)


def resized_size(width: int, height: int, resize_short: int) -> tuple[int, int]:
    """(w, h) after scaling the short side to ``resize_short``, keeping aspect (torchvision)."""
    if width <= height:
        return resize_short, int(resize_short * height / width)
    return int(resize_short * width / height), resize_short


def crop_box(width: int, height: int, crop: int,
             crop_width: int = 0) -> tuple[int, int, int, int]:
    """Centre-crop box (``crop`` high, ``crop_width`` or ``crop`` wide), rounded like
    torchvision's ``CenterCrop``."""
    wide = crop_width or crop
    left = int(round((width - wide) / 2.0))
    top = int(round((height - crop) / 2.0))
    return left, top, left + wide, top + crop


def letterbox_geometry(image_height: int, image_width: int, target_height: int,
                       target_width: int) -> tuple[float, int, int, int, int]:
    """``(ratio, pad_top, pad_left, new_height, new_width)`` of an image letterboxed into the
    model's ``target_height`` x ``target_width``: scaled by ``ratio`` (aspect kept, up or down)
    to ``new_width`` x ``new_height`` and pasted at (``pad_left``, ``pad_top``) on a grey canvas.

    THE one definition: ``decode_and_crop`` builds the input with it, and detection scoring
    maps a box back to the original pixels with it (``x = (x_input - pad_left) / ratio``), so
    the two can never disagree. Each new side is at least 1 pixel (a 1x10000 strip still has
    a row), at most the target's.
    """
    if min(image_height, image_width, target_height, target_width) < 1:
        raise ValueError(f"letterbox of a {image_width}x{image_height} image into "
                         f"{target_width}x{target_height}: every side must be positive")
    ratio = min(target_height / image_height, target_width / image_width)
    new_width = min(target_width, max(1, round(image_width * ratio)))
    new_height = min(target_height, max(1, round(image_height * ratio)))
    pad_left = (target_width - new_width) // 2
    pad_top = (target_height - new_height) // 2
    return ratio, pad_top, pad_left, new_height, new_width


def covering_size(width: int, height: int, recipe: PreprocessRecipe) -> tuple[int, int]:
    """(w, h) the image is resized to: exactly the input size (stretch), the largest that fits
    inside it (letterbox), or its short side at ``resize_short`` (torchvision), grown where a
    non-square crop would not fit inside."""
    if recipe.resize_rule == "stretch":
        return recipe.width, recipe.height
    if recipe.resize_rule == "letterbox":
        _, _, _, new_height, new_width = letterbox_geometry(height, width, recipe.height,
                                                            recipe.width)
        return new_width, new_height
    w, h = resized_size(width, height, recipe.resize_short)
    grow = max(1.0, recipe.width / w, recipe.height / h)
    return (w, h) if grow == 1.0 else (max(recipe.width, round(w * grow)),
                                      max(recipe.height, round(h * grow)))


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


def letterbox(img: Image.Image, recipe: PreprocessRecipe) -> Image.Image:
    """The whole image scaled to fit the model's input and centred on a grey canvas, as
    ``letterbox_geometry`` says (the geometry scoring undoes)."""
    _, pad_top, pad_left, new_height, new_width = letterbox_geometry(
        img.height, img.width, recipe.height, recipe.width)
    canvas = Image.new("RGB", (recipe.width, recipe.height), LETTERBOX_PAD)
    canvas.paste(img.resize((new_width, new_height), _PIL_RESAMPLING), (pad_left, pad_top))
    return canvas


def decode_and_crop(path: str | os.PathLike, recipe: PreprocessRecipe) -> np.ndarray:
    """Decode an image to upright RGB, resize it by the recipe's rule, centre crop (or
    letterbox): uint8 (height, width, 3). (A 1-channel model's luma is taken at load, from
    this RGB.)"""
    with open_image(path) as img:
        img = to_rgb(upright(img))
        if recipe.resize_rule == "letterbox":
            img = letterbox(img, recipe)
        else:
            size = covering_size(img.width, img.height, recipe)
            img = img.resize(size, _PIL_RESAMPLING)
            img = img.crop(crop_box(size[0], size[1], recipe.height, recipe.width))
        out = np.asarray(img, dtype=np.uint8)
    if out.shape != (recipe.height, recipe.width, 3):  # pragma: no cover - PIL contract
        raise ValueError(f"{path}: unexpected crop shape {out.shape}")
    return out


def normalise(images: np.ndarray, recipe: PreprocessRecipe) -> np.ndarray:
    """uint8 HWC RGB image or NHWC batch -> the model's input in the recipe's layout: float32
    ``(x - mean) / std`` (or the uint8 pixels of a uint8 model), in its channel order, or
    the luma of a 1-channel model.

    One vectorised pass per channel that writes straight into the output layout, so NCHW needs
    no separate transpose copy and no float64 temporaries.
    """
    arr = np.asarray(images)
    single = arr.ndim == 3
    if single:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"expected (H, W, 3) or (N, H, W, 3) images, got shape {arr.shape}")
    if recipe.channel_order == "BGR":
        arr = arr[..., ::-1]
    if recipe.channels == 1:
        luma = np.tensordot(arr, np.asarray(LUMA, np.float32), axes=([3], [0]))
        arr = (np.rint(luma).astype(np.uint8) if recipe.dtype == "uint8" else luma)[..., None]
    n, h, w, channels = arr.shape
    nchw = recipe.layout == "NCHW"
    out_shape = (n, channels, h, w) if nchw else (n, h, w, channels)
    if recipe.dtype == "uint8":
        out = np.ascontiguousarray(arr.transpose(0, 3, 1, 2) if nchw else arr, dtype=np.uint8)
        return out[0] if single else out
    mean = recipe.mean * channels if len(recipe.mean) == 1 else recipe.mean
    std = recipe.std * channels if len(recipe.std) == 1 else recipe.std
    out = np.empty(out_shape, dtype=np.float32)
    if nchw:
        for c in range(channels):
            dst = out[:, c]
            np.subtract(arr[..., c], np.float32(mean[c]), out=dst, dtype=np.float32)
            dst *= np.float32(1.0 / std[c])
    else:
        np.subtract(arr, np.asarray(mean, np.float32), out=out, dtype=np.float32)
        out *= np.asarray([1.0 / s for s in std], np.float32)
    return out[0] if single else out


def recipe_for(spec: Any, layout: str) -> PreprocessRecipe:
    """A model's preprocessing (its ``ModelSpec``: geometry, normalisation, channels, input
    type) in ``layout``."""
    return PreprocessRecipe(resize_short=spec.resize_short, crop=spec.input_size,
                            mean=tuple(spec.mean), std=tuple(spec.std), layout=layout,
                            crop_width=spec.input_width if spec.input_width != spec.input_size
                            else 0, resize_rule=spec.resize_rule, channels=spec.channels,
                            channel_order=spec.channel_order, dtype=spec.input_dtype)
