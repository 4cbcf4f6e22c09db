"""What an ensemble's different input geometries cost, and the alternative we did not take.

quantmark's ensemble QSL holds one preprocessed tensor per distinct member input (Lite0 at
224 px NCHW, Lite1 at 240 NCHW, Lite2 at 260 NHWC for TFLite) and gathers every one for each
batch. This measures, on the built-in dataset's performance set:

1. ``load``: LoadGen's load of the performance samples into one input against three: seconds
   (untimed by LoadGen, but a run waits for it) and resident MB;
2. ``gather``: the timed part, one batch gathered from one input against three (Offline's
   batch 8 and SingleStream's single-sample view), in microseconds;
3. ``resize``: the alternative, one stored input at the largest geometry resized to the
   others per batch inside the timed path (PIL bilinear, as the QSL's own resampling, then
   normalised), in microseconds per sample.

    python -m quantmark.bench.ensemble_inputs [--samples 1024] [--rounds 2000] --output FILE

Run it alone: it times on every core.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json
from quantmark.qsl import open_dataset
from quantmark.qsl.library import QuerySampleLibrary
from quantmark.qsl.preprocess import PreprocessRecipe, normalise
from quantmark.sut.ensemble.inputs import EnsembleSamples

log = logging.getLogger("quantmark.bench.ensemble_inputs")
LITE = dict(mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0))
RECIPES = (PreprocessRecipe(256, 224, layout="NCHW", **LITE),  # Lite0 at ORT / OpenVINO
           PreprocessRecipe(272, 240, layout="NCHW", **LITE),  # Lite1
           PreprocessRecipe(292, 260, layout="NHWC", **LITE))  # Lite2 at TFLite


def _samples(recipes: tuple[PreprocessRecipe, ...], count: int) -> EnsembleSamples:
    dataset = open_dataset(None)
    return EnsembleSamples([QuerySampleLibrary.from_dataset(dataset, recipe, count)
                            for recipe in recipes])


def _median_us(call: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def load_and_gather(recipes: tuple[PreprocessRecipe, ...], count: int, rounds: int
                    ) -> dict[str, Any]:
    """Load the performance set into these inputs; time gathering batches from them."""
    samples = _samples(recipes, count)
    indices = list(range(min(count, samples.total_count)))
    started = time.perf_counter()
    samples.load(indices)
    load_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    picks = [rng.choice(indices, 8, replace=False).tolist() for _ in range(64)]
    buffer = samples.batch(picks[0])
    step = iter(range(10**9))
    batch8 = _median_us(lambda: samples.batch(picks[next(step) % 64], out=buffer), rounds)
    single = _median_us(lambda: samples.sample(indices[next(step) % len(indices)]), rounds)
    return {"inputs": len(recipes), "samples": len(indices), "load_s": round(load_s, 3),
            "resident_mb": round(samples.loaded_bytes / 2**20, 1),
            "gather_batch8_us": round(batch8, 1), "sample_view_us": round(single, 2)}


def resize_per_batch(count: int, rounds: int) -> dict[str, Any]:
    """The alternative: keep the 260 px crops (uint8, as cached) and make the 224 and 240 px
    inputs from them per batch, in the timed path."""
    from PIL import Image

    samples = _samples(RECIPES[2:], count)
    source = samples.libraries[0]._source  # the uint8 260 px crops the QSL normalises
    images = [Image.fromarray(np.asarray(source[i])) for i in range(8)]

    def convert() -> None:
        for size, recipe in ((224, RECIPES[0]), (240, RECIPES[1])):
            crops = np.stack([np.asarray(image.resize((size, size), Image.Resampling.BILINEAR))
                              for image in images])
            normalise(crops, recipe)

    per_batch = _median_us(convert, max(rounds // 10, 20))
    return {"batch": 8, "resize_and_normalise_batch8_us": round(per_batch, 1),
            "per_sample_us": round(per_batch / 8, 1)}


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.ensemble_inputs")
    parser.add_argument("--samples", type=int, default=1024, help="performance samples")
    parser.add_argument("--rounds", type=int, default=2000, help="timed gathers per figure")
    parser.add_argument("--output", required=True, help="JSON file for the figures")
    args = parser.parse_args(argv)
    found = {"one_input": load_and_gather(RECIPES[:1], args.samples, args.rounds),
             "three_inputs": load_and_gather(RECIPES, args.samples, args.rounds),
             "resize_alternative": resize_per_batch(args.samples, args.rounds)}
    for name, figures in found.items():
        log.info("%s: %s", name, figures)
    atomic_write_json(Path(args.output), found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
