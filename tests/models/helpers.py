"""Test helpers: offline image-like inputs built from skimage's bundled photos."""

from __future__ import annotations

import numpy as np
from PIL import Image

from quantmark.models.zoo import ModelSpec


def preprocess(image: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """Resize short side, centre crop, normalise: [3,S,S] float32 (the QSL's job in real runs)."""
    im = Image.fromarray(image).convert("RGB")
    scale = spec.resize_short / min(im.size)
    im = im.resize((round(im.width * scale), round(im.height * scale)), Image.BILINEAR)
    left, top = (im.width - spec.input_size) // 2, (im.height - spec.input_size) // 2
    im = im.crop((left, top, left + spec.input_size, top + spec.input_size))
    x = (np.asarray(im, np.float32) - np.float32(spec.mean)) / np.float32(spec.std)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def photo_crops(spec: ModelSpec, n: int, seed: int) -> np.ndarray:
    """Random crops/flips of skimage's photos: small, offline, image-like data."""
    from skimage import data

    photos = [data.coffee(), data.chelsea(), data.astronaut(), data.rocket(), data.cat(),
              data.immunohistochemistry(), data.retina()]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        photo = photos[rng.integers(len(photos))]
        h, w = photo.shape[:2]
        c = int(min(h, w) * rng.uniform(0.5, 1.0))
        y, x = rng.integers(0, h - c + 1), rng.integers(0, w - c + 1)
        crop = photo[y:y + c, x:x + c]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out.append(preprocess(np.ascontiguousarray(crop), spec))
    return np.stack(out)
