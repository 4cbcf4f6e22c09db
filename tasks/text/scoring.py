"""A text model's quality against its FP32 reference: what a SUT's answers are worth.

The reference is the model's own FP32 function: the FP32 ONNX file run by ONNX Runtime on the
same token samples (cached, sealed by sha256, keyed by the model file and the samples). An
embedding model is judged per sentence by the cosine of its embedding to the reference's, and
by nearest-neighbour retrieval (does each sentence find the same nearest other sentence as
under the reference?); a classifier by accuracy on the labels and agreement with the
reference's classes. Every figure carries a bootstrap interval over sentences (scipy.stats),
and two runs on the same samples are compared sentence by sentence (a paired bootstrap).
MLPerf's rule for its BERT task, 99% of the FP32 reference's quality, is reported met, not
met, or not resolved by the interval.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.tasks.accuracy_log import read_log_entries, response_bytes, sample_index

log = logging.getLogger(__name__)

#: per-sentence outcomes an accuracy run leaves beside its log (what two runs are paired on)
SCORES_FILE = "text_scores.json"
#: MLPerf's quality rule for BERT: 99% of the FP32 reference
TARGET_FRACTION = 0.99
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20261129


@dataclass(frozen=True)
class Figure:
    """A mean over sentences, in percent, with its bootstrap interval."""

    value: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.value:.3f}% [{self.low:.3f}, {self.high:.3f}]"


def mean_interval(values: np.ndarray) -> Figure:
    """The mean of per-sentence values (0..1) in percent with a 95% bootstrap interval
    (scipy.stats.bootstrap, BCa; percentile where every value is equal)."""
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=np.float64)
    mean = 100.0 * float(data.mean())
    if data.size < 2 or np.ptp(data) <= 1e-12 * max(1.0, abs(float(data.mean()))):
        return Figure(mean, mean, mean)  # no spread: nothing to resample
    for method in ("BCa", "percentile"):  # BCa fails on near-degenerate data: percentile
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = bootstrap((data,), np.mean, confidence_level=CONFIDENCE,
                              n_resamples=RESAMPLES, method=method,
                              random_state=np.random.default_rng(SEED))
        low, high = found.confidence_interval
        if np.isfinite(low) and np.isfinite(high):
            break
    return Figure(mean, 100.0 * float(low), 100.0 * float(high))


def read_answers(log_path: Path, total: int, width: int | None) -> tuple[np.ndarray, int]:
    """(answers, missing) from an accuracy log: each sample's embedding ``[total, width]``
    (``width`` given) or class ``[total]`` (None). One answer a sample: a repeat must match."""
    shape = (total, width) if width else (total,)
    answers = np.full(shape, np.nan, dtype=np.float32)
    seen = np.zeros(total, dtype=bool)
    for number, entry in enumerate(read_log_entries(log_path)):
        where = f"{log_path}: entry {number}"
        index = sample_index(entry, where)
        raw = np.frombuffer(response_bytes(entry["data"], where), dtype=np.float32)
        if index >= total or raw.size != (width or 1):
            raise UserError(f"{where}: sample {index} answered {raw.size} floats; a text model "
                            f"answers {width or 1} per sample of {total}: pass the log of this "
                            "run's model and dataset")
        answers[index] = raw if width else raw[0]
        seen[index] = True
    return answers, int(total - seen.sum())


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per-row cosine similarity (float64)."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)
    return np.sum(got * want, axis=1) / np.maximum(norms, 1e-30)


def nearest_neighbours(vectors: np.ndarray) -> np.ndarray:
    """Each row's nearest other row by cosine (the retrieval a sentence index answers)."""
    unit = vectors.astype(np.float64)
    unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-30)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def embedding_outcomes(got: np.ndarray, reference: np.ndarray) -> dict[str, np.ndarray]:
    """Per sentence: cosine to the reference, and whether its nearest neighbour is the
    reference's."""
    return {"cosine": cosines(got, reference),
            "retrieval_agrees": (nearest_neighbours(got) == nearest_neighbours(reference)
                                 ).astype(np.float64)}


def classifier_outcomes(got: np.ndarray, reference_logits: np.ndarray,
                        labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per sentence: whether the class agrees with the reference's, and (labelled data)
    whether it is right and whether the reference's is."""
    want = reference_logits.argmax(axis=1)
    found = {"agrees": (got.astype(np.int64) == want).astype(np.float64)}
    if labels is not None:
        found["correct"] = (got.astype(np.int64) == labels).astype(np.float64)
        found["reference_correct"] = (want == labels).astype(np.float64)
    return found


def target_line(figure: Figure, reference_percent: float, name: str) -> dict[str, Any]:
    """MLPerf's 99%-of-FP32 rule on ``figure``: met where its interval's low end clears the
    threshold, not met where its high end is below, else not resolved."""
    threshold = TARGET_FRACTION * reference_percent
    verdict = ("met" if figure.low >= threshold else "not met" if figure.high < threshold
               else "not resolved")
    return {"rule": f"{name} >= 99% of the FP32 reference's ({reference_percent:.2f}%): "
                    f">= {threshold:.2f}%", "threshold": threshold, "verdict": verdict}


def reference_outputs(model_file: Path, inputs: tuple[str, ...], output: str,
                      tokens: np.ndarray, cache: Path) -> np.ndarray:
    """The FP32 model's outputs on ``tokens`` (``[N, 3, L]``), run by ONNX Runtime, batches of
    16 each cut to its longest sequence; cached under ``cache`` by the model file's and the
    samples' sha256, and verified against its own sha256 before it is trusted."""
    from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file

    model_hash = hash_file(model_file)
    key = hashlib.sha256(model_hash.encode() + output.encode()
                         + np.ascontiguousarray(tokens).tobytes()).hexdigest()[:24]
    data_file, seal = cache / f"reference-{key}.npy", cache / f"reference-{key}.json"
    try:
        sealed = json.loads(seal.read_text())
        if hash_file(data_file) == sealed["sha256"]:
            return np.load(data_file)
        log.warning("text reference %s differs from its seal; computing it again", data_file)
    except (OSError, ValueError, KeyError):
        pass
    found = _run_reference(model_file, inputs, output, tokens)
    import io

    buffer = io.BytesIO()
    np.save(buffer, found)
    atomic_write_bytes(data_file, buffer.getvalue())
    atomic_write_json(seal, {"sha256": hash_file(data_file), "model_sha256": model_hash,
                             "output": output, "samples": int(len(tokens))})
    return found


def _run_reference(model_file: Path, inputs: tuple[str, ...], output: str,
                   tokens: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    from quantmark.models.text_graph import token_feeds

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_file), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    parts = [session.run([output], token_feeds(tokens[i:i + 16], inputs, dynamic=True))[0]
             for i in range(0, len(tokens), 16)]
    return np.concatenate(parts).astype(np.float32)


def paired_difference(baseline: np.ndarray, candidate: np.ndarray) -> Figure:
    """The candidate's mean change against the baseline on the same sentences, in points,
    with a paired bootstrap interval (resampling sentences)."""
    return mean_interval(np.asarray(candidate, np.float64) - np.asarray(baseline, np.float64))


def accuracy_text(lines: list[str]) -> str:
    """The official-form accuracy.txt: one figure a line."""
    return "".join(f"{line}\n" for line in lines)
