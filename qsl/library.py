"""The Query Sample Library LoadGen drives: loads/unloads samples into RAM on LoadGen's request.

Samples come either from the uint8 preprocessed cache (mmap; normalised to float32 at load time)
or from an in-memory float32 array (tests, micro-benchmarks). A SUT's ``encode`` (a full-integer
model's input quantization) is applied at load too, outside the timed path. Loaded samples live
in ONE contiguous buffer plus an index map (sample index -> buffer slot), so assembling a batch
is a single ``np.take`` over the buffer: no per-sample Python, no dict of arrays, no disk I/O.
That keeps an 8-image gather in the tens of microseconds, far below inference time.

LoadGen is imported lazily, only in ``construct``, so the rest of qsl works without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .imagenet import ImageFolderDataset
from .preprocess import PreprocessRecipe, normalise

_NOT_LOADED = -1


class SampleNotLoadedError(KeyError):
    """A batch asked for a sample LoadGen has not loaded (or already unloaded)."""


class QuerySampleLibrary:
    """Samples ``0..total_count-1`` with labels; LoadGen chooses which are resident in RAM."""

    def __init__(
        self,
        source: np.ndarray,
        labels: Iterable[int] | np.ndarray,
        performance_sample_count: int,
        recipe: PreprocessRecipe | None = None,
        rows: np.ndarray | None = None,
        encode: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        """``source`` is uint8 NHWC (normalised with ``recipe`` at load) or, when ``recipe`` is
        None, float32 already in final layout. ``rows`` maps sample index -> source row.
        ``encode`` turns loaded float32 samples into what the SUT's input wants (same shape)."""
        self._source = source
        self._encode = encode
        self._recipe = recipe
        self._rows = (
            np.arange(len(source), dtype=np.int64)
            if rows is None
            else np.asarray(rows, dtype=np.int64)
        )
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) != len(self._rows):
            raise ValueError(f"{len(self.labels)} labels for {len(self._rows)} samples")
        if recipe is None and source.dtype not in (np.float32, np.int64):
            raise ValueError("samples without a recipe must already be float32 (or a text "
                             "model's int64 tokens) in final layout")
        if recipe is not None and source.dtype != np.uint8:
            raise ValueError("samples with a recipe must be uint8 NHWC crops")
        if performance_sample_count < 1:
            raise ValueError("performance_sample_count must be positive")
        self.total_count = len(self._rows)
        self.performance_count = min(int(performance_sample_count), self.total_count)
        self._slot = np.full(self.total_count, _NOT_LOADED, dtype=np.int64)
        self._buffer: np.ndarray | None = None
        self._handle = None

    @classmethod
    def from_arrays(
        cls,
        samples: np.ndarray,
        labels: Iterable[int] | np.ndarray,
        performance_sample_count: int,
    ) -> QuerySampleLibrary:
        """A QSL over float32 samples already in final layout (tests, benchmarks)."""
        return cls(np.asarray(samples, dtype=np.float32), labels, performance_sample_count)

    @classmethod
    def from_tokens(cls, tokens: np.ndarray, labels: Iterable[int] | np.ndarray,
                    performance_sample_count: int) -> QuerySampleLibrary:
        """A QSL over a text model's token samples ``[N, 3, seq_len]`` (int64: ids, mask,
        token types), gathered into batches as images are."""
        return cls(np.ascontiguousarray(tokens, dtype=np.int64), labels,
                   performance_sample_count)

    @classmethod
    def from_dataset(
        cls,
        dataset: ImageFolderDataset,
        recipe: PreprocessRecipe,
        performance_sample_count: int,
        workers: int | None = None,
        encode: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> QuerySampleLibrary:
        """A QSL over the dataset's evaluation items, backed by the (built-once) uint8 cache."""
        from .cache import cached_images
        from .footprint import check_recipe_fits

        check_recipe_fits(recipe, len(dataset), performance_sample_count)
        images = cached_images(dataset, recipe, workers)
        return cls(images, dataset.labels, performance_sample_count, recipe, dataset.cache_rows,
                   encode)

    # -- residency -------------------------------------------------------------------------

    @property
    def loaded_count(self) -> int:
        return int(np.count_nonzero(self._slot != _NOT_LOADED))

    @property
    def loaded_bytes(self) -> int:
        return 0 if self._buffer is None else int(self._buffer.nbytes)

    def sample_shape(self) -> tuple[int, ...]:
        if self._recipe is None:
            return tuple(self._source.shape[1:])
        return self._recipe.input_shape()

    def _check(self, indices: Iterable[int]) -> np.ndarray:
        idx = np.asarray(
            list(indices) if not isinstance(indices, np.ndarray) else indices, dtype=np.int64
        ).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.total_count):
            raise IndexError(f"sample index out of range 0..{self.total_count - 1}")
        return idx

    def _materialise(self, idx: np.ndarray) -> np.ndarray:
        """float32 copies of these samples, read in source order (sequential mmap reads)."""
        rows = self._rows[idx]
        order = np.argsort(rows, kind="stable")
        raw_pixels = self._recipe is not None and self._recipe.dtype == "uint8"  # uint8 model
        dtype = (self._source.dtype if self._recipe is None  # float32, or a text's int64
                 else np.uint8 if raw_pixels else np.float32)
        out = np.empty((len(idx), *self.sample_shape()), dtype=dtype)
        step = 256  # bounds the uint8 temporary; float32 output is written in place
        for start in range(0, len(idx), step):
            part = order[start : start + step]
            raw = self._source[rows[part]]
            out[part] = raw if self._recipe is None else normalise(raw, self._recipe)
        if self._encode is None:
            return out
        encoded = np.ascontiguousarray(self._encode(out))
        if encoded.shape != out.shape:
            raise ValueError(f"encode changed the samples' shape {out.shape} to {encoded.shape}")
        return encoded

    def load(self, indices: Iterable[int]) -> None:
        """Make these samples resident: normalised (and encoded) in the contiguous buffer."""
        idx = np.unique(self._check(indices))
        new = idx[self._slot[idx] == _NOT_LOADED]
        if not new.size:
            return
        block = self._materialise(new)
        if self._buffer is None:
            self._buffer, base = block, 0
        else:
            base = len(self._buffer)
            self._buffer = np.concatenate([self._buffer, block])
        self._buffer.flags.writeable = False  # SUTs get views: they must not alter samples
        self._slot[new] = base + np.arange(len(new))

    def unload(self, indices: Iterable[int]) -> None:
        """Drop these samples; the buffer is compacted (and freed when empty)."""
        idx = self._check(indices)
        self._slot[idx] = _NOT_LOADED
        resident = np.flatnonzero(self._slot != _NOT_LOADED)
        if not resident.size:
            self._buffer = None
            return
        assert self._buffer is not None
        old = self._slot[resident]
        if len(old) != len(self._buffer):
            self._buffer = np.take(self._buffer, old, axis=0)
            self._buffer.flags.writeable = False
            self._slot[resident] = np.arange(len(resident))

    def unload_all(self) -> None:
        self._slot[:] = _NOT_LOADED
        self._buffer = None

    # -- access ----------------------------------------------------------------------------

    def batch(
        self, indices: Iterable[int] | np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``(len(indices), ...)`` loaded samples (float32, or the SUT's encoding): one gather
        from the buffer. ``out`` (a preallocated, e.g. pinned, array of the buffer's dtype)
        avoids an allocation per batch.
        """
        idx = self._check(indices)
        slots = self._slot[idx]
        if (slots == _NOT_LOADED).any():
            missing = idx[slots == _NOT_LOADED][:5].tolist()
            raise SampleNotLoadedError(
                f"samples {missing} are not loaded; LoadGen loads the performance set via "
                "load_query_samples before issuing queries (call load() in tests)"
            )
        assert self._buffer is not None
        return np.take(self._buffer, slots, axis=0, out=out)

    def sample(self, index: int) -> np.ndarray:
        """One loaded sample as a read-only ``(1, ...)`` VIEW of the buffer: no copy, few ops.

        SingleStream's hot path: a fresh 600 KB array per query costs page faults, and each
        extra numpy call costs ~10 us when caches are cold after inference.
        """
        slot = self._slot[index]
        if slot < 0:
            raise SampleNotLoadedError(f"sample {index} is not loaded")
        return self._buffer[slot : slot + 1]

    def label(self, index: int) -> int:
        return int(self.labels[index])

    # -- LoadGen ---------------------------------------------------------------------------

    def construct(self):
        """Register with LoadGen; returns the handle for ``StartTest``. Pair with ``destroy``."""
        import mlperf_loadgen as lg

        if self._handle is None:
            self._handle = lg.ConstructQSL(
                self.total_count, self.performance_count, self._lg_load, self._lg_unload
            )
        return self._handle

    def destroy(self) -> None:
        if self._handle is not None:
            import mlperf_loadgen as lg

            lg.DestroyQSL(self._handle)
            self._handle = None
        self.unload_all()

    def _lg_load(self, indices) -> None:
        self.load(list(indices))

    def _lg_unload(self, indices) -> None:
        self.unload(list(indices))

    def __enter__(self):
        return self.construct()

    def __exit__(self, *exc) -> None:
        self.destroy()
