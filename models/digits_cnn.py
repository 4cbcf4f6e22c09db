"""The digits workload's model: a small CNN that quantmark trains itself, once, on the train half
of scikit-learn's handwritten digits (``quantmark.qsl.digits_split``) and scores on the other.

Only ops every converter and quantizer here handles: Conv2d, ReLU, MaxPool2d, Flatten, Linear
(ONNX export, OpenVINO, onnx2tf/TFLite, torch FX INT8).

Trained deterministically: a fixed seed, one intra-op thread, fixed-order minibatches from a
seeded generator, a fixed number of epochs, inputs normalised by the QSL's own ``normalise``.
The weights' identity is the hash of the training recipe (``training_recipe``: the
hyper-parameters, the spec's input and normalisation, the split's key, this file's and the
split module's source, torch's version); the trained state_dict is cached under it, with its
sha256 in a sidecar that every load checks: a changed or missing file is retrained with one
warning line. Different CPUs may round differently, so two machines' files can differ in the
last bits while sharing the recipe; each machine's file is hashed where it is used.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

if TYPE_CHECKING:  # torch is imported lazily, as in the zoo
    import torch
    from torch import nn

log = logging.getLogger(__name__)


class TrainedSpec(Protocol):
    """What training reads of a model's spec (``models.zoo.ModelSpec`` has it): the zoo
    builds this module's network, so this module does not import the zoo back."""

    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int


# The training recipe: change any of it and the weights are retrained under a new identity.
RECIPE: dict[str, Any] = {"optimizer": "Adam", "lr": 3e-3, "epochs": 20, "batch_size": 64,
                          "seed": 0, "threads": 1, "loss": "cross-entropy"}
SHAPE = {"channels": 1, "input_size": 8, "input_width": 8, "num_classes": 10,
         "input_dtype": "float32"}


def digits_cnn(num_classes: int = 10) -> nn.Module:
    """Two 3x3 convolutions, one 2x2 max-pool, two linear layers: 1x8x8 -> ``num_classes``."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def training_recipe(spec: TrainedSpec) -> dict[str, Any]:
    """Everything the trained weights depend on, computed without torch or scikit-learn."""
    from quantmark.qsl import digits_split

    got = {name: getattr(spec, name) for name in SHAPE}
    if got != SHAPE:
        raise UserError(f"model {spec.name} is trained by quantmark for a 1x8x8 float32 input "
                        f"and 10 classes, not {got}; drop --input-size/--num-classes, or pass "
                        "your own weights with --model-path")
    code = [Path(__file__), Path(digits_split.__file__)]
    return {"recipe": RECIPE, "shape": SHAPE, "mean": list(spec.mean), "std": list(spec.std),
            "split": digits_split.split_key(),
            "code": {path.name: hash_file(path, 64) for path in code},
            "torch": dist_version("torch")}


def recipe_hash(spec: TrainedSpec) -> str:
    return hash_json(training_recipe(spec), 16)


def trained_identity(spec: TrainedSpec) -> dict[str, Any]:
    """The weights' identity for cache keys (``zoo.weights_identity``): the recipe's hash."""
    return {"kind": "trained", "recipe": recipe_hash(spec), "seed": RECIPE["seed"]}


def trained_description(spec: TrainedSpec) -> str:
    """What the weights are, as written into results."""
    from quantmark.qsl.digits_split import split_description

    split = split_description()
    return (f"trained by quantmark on scikit-learn digits train split ({split['train']} "
            f"samples), seed {RECIPE['seed']}; scored on the held-out {split['held_out']} "
            f"(recipe {recipe_hash(spec)})")


def trained_file(spec: TrainedSpec) -> Path:
    """The trained state_dict file, verified by sha256; trained first when absent or changed."""
    key = recipe_hash(spec)
    seal = cache_dir("trained-weights") / f"{spec.name}-{key}.json"
    path, problem = _verified(seal)
    if path is not None:
        return path
    if problem is not None:
        log.warning("trained weights of %s failed verification: %s; retraining them", spec.name,
                    problem)
    else:
        log.info("training %s on scikit-learn's digits (one-off, seconds) ...", spec.name)
    started = time.perf_counter()
    model = train(spec)
    seconds = time.perf_counter() - started
    top1 = held_out_top1(model, spec)
    log.info("trained %s in %.1f s: held-out top-1 %.2f %%", spec.name, seconds, top1)
    data = _state_bytes(model)
    digest = hashlib.sha256(data).hexdigest()
    # named by content: a racing process writes its own file, and each seal names its own
    path = seal.with_name(f"{seal.stem}-{digest[:16]}.pt")
    atomic_write_bytes(path, data)
    atomic_write_json(seal, {"file": path.name, "sha256": digest, "held_out_top1": top1,
                             "train_seconds": round(seconds, 2),
                             "recipe": training_recipe(spec)})
    return path


def _verified(seal: Path) -> tuple[Path | None, str | None]:
    """(the weights file, None) when ``seal`` names a file with its recorded sha256; else
    (None, what is wrong), or (None, None) when nothing was ever trained."""
    try:
        record = json.loads(seal.read_text())
        name, digest = record["file"], record["sha256"]
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{seal.name} cannot be read ({type(exc).__name__})"
    path = seal.with_name(str(name))
    if Path(str(name)).name != str(name) or not path.is_file():
        return None, f"{name} is missing"
    if hash_file(path, 64) != digest:
        return None, f"{path.name} differs from what was trained"
    return path, None


def _state_bytes(model: nn.Module) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def model_inputs(spec: TrainedSpec, pixels: np.ndarray) -> torch.Tensor:
    """Grey pixels ``[N, 8, 8]`` -> the model's NCHW input, through the QSL's own
    preprocessing (``normalise`` of the RGB that a grey PNG decodes to)."""
    import torch

    from quantmark.qsl.preprocess import normalise, recipe_for

    rgb = np.repeat(np.asarray(pixels, dtype=np.uint8)[..., None], 3, axis=-1)
    return torch.from_numpy(normalise(rgb, recipe_for(spec, "NCHW")))


def train(spec: TrainedSpec) -> nn.Module:
    """The CNN trained on the train half by ``RECIPE``, in eval mode; the caller's RNG state
    and thread count are left as they were."""
    import torch

    from quantmark.qsl.digits_split import train_arrays

    pixels, labels = train_arrays()
    x, y = model_inputs(spec, pixels), torch.from_numpy(labels)
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.set_num_threads(RECIPE["threads"])
        try:
            torch.manual_seed(RECIPE["seed"])
            model = digits_cnn(spec.num_classes)
            optimiser = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])
            order = torch.Generator().manual_seed(RECIPE["seed"])
            model.train()
            for _ in range(RECIPE["epochs"]):
                for batch in torch.randperm(len(x), generator=order).split(RECIPE["batch_size"]):
                    optimiser.zero_grad()
                    torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                    optimiser.step()
        finally:
            torch.set_num_threads(threads)
    return model.eval()


def held_out_top1(model: nn.Module, spec: TrainedSpec) -> float:
    """Top-1 accuracy (percent) of ``model`` on the held-out half, computed in torch."""
    import torch

    from quantmark.qsl.digits_split import held_out_arrays

    pixels, labels = held_out_arrays()
    with torch.no_grad():
        predicted = model(model_inputs(spec, pixels)).argmax(dim=1).numpy()
    return float((predicted == labels).mean() * 100.0)
