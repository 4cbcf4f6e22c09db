"""What a detector's postprocessing costs inside quantmark's timed work, for the vendor-parity
benchmark (``quantmark.bench.vendor_parity``).

MLPerf times a SUT up to its final answers, so quantmark's detector run times the task's
``respond`` (score threshold, NMS, top-K, LoadGen's arrays) inside the SUT's work, while
``benchmark_app``, ``litert-benchmark`` and the framework loop stop at the model's output. A
parity ratio below 1 can then be the NMS or the harness; this tells them apart. In a fresh
process it loads the SUT's backend as the run does, feeds it the run's own samples (the task's
QSL, letterboxed as the SUT is fed) batch by batch, and times ``predict`` and then ``respond``
on that very output, as a SUT worker calls them, one after the other, for ``--seconds``.
Prints one JSON object:

    python -m quantmark.bench.parity_postprocess --sut ov-int8 --model digits-detect \\
        --batch-size 8 --seconds 2

``share`` sets the median ``respond`` time per batch against quantmark's own time per batch
and worker from the same round: p50 latency in SingleStream (one sample a query); in Offline
``workers * batch / samples_per_s``, each worker thread's time per batch (a worker predicts
and then responds, so that is the part of its time the postprocessing takes). ``respond`` runs
alone here, not beside the other workers' inference, so the share is, if anything, low.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

WARMUP_BATCHES = 3
WHAT = ("the task's respond (threshold, NMS, top-K) timed alone on the SUT's own outputs, "
        "over quantmark's time per batch and worker in the same round")


def measure(sut: str, model: str, batch: int, threads: int, seconds: float,
            model_path: str | None = None, samples: int | None = None) -> dict[str, Any]:
    """Median ms per batch of the backend's ``predict`` and of the task's ``respond`` on the
    run's own samples; ``respond_ms`` is None for a task without postprocessing."""
    from quantmark.bench.vendor_loops import distinct, prepared_backend, real_batches

    loaded = prepared_backend(sut, model, batch, threads, model_path)
    task = loaded.task
    if hasattr(task, "for_sut"):  # the task as this SUT runs it (its framework's NMS op)
        task = task.for_sut(loaded.info)
    respond = task.respond(loaded.spec)
    batches, indices = real_batches(loaded, batch, samples)
    predict = loaded.backend.predict
    predicted, responded = [], []
    work = list(zip(batches, (chunk.tolist() for chunk in indices), strict=True))
    for data, chunk in work[:WARMUP_BATCHES]:
        outputs = predict(data)
        if respond is not None:
            respond(outputs, chunk)
    deadline = time.perf_counter() + seconds
    for data, chunk in itertools.cycle(work):
        start = time.perf_counter()
        outputs = predict(data)
        between = time.perf_counter()
        if respond is not None:
            respond(outputs, chunk)
        end = time.perf_counter()
        predicted.append(between - start)
        responded.append(end - between)
        if start > deadline:
            break
    loaded.backend.close()
    return {"sut": sut, "model": model, "batch": batch, "calls": len(predicted),
            "distinct_samples": distinct(indices),
            "task": task.name, "postprocess": task.describe(loaded.spec).get("postprocess"),
            "predict_ms": 1e3 * statistics.median(predicted),
            "respond_ms": 1e3 * statistics.median(responded) if respond is not None else None}


def share(throughput: bool, quantmark_value: float, respond_ms: float, batch: int,
          workers: int) -> float:
    """``respond``'s part of quantmark's time per batch and worker (see the module docstring):
    ``quantmark_value`` is samples/s (Offline) or p50 ms (SingleStream, one sample a query)."""
    batch_ms = (1e3 * workers * batch / quantmark_value if throughput else quantmark_value)
    return respond_ms / batch_ms


def summary(rounds: list[dict[str, Any]], ratios: dict[str, dict[str, Any]]
            ) -> dict[str, Any]:
    """The rounds' shares, and each parity ratio as it would read were the postprocessing
    free (ratio / (1 - median share): an estimate, the harness's part of the gap)."""
    shares = [entry["share"] for entry in rounds]
    middle = statistics.median(shares)
    return {"what": WHAT, "nms": rounds[-1].get("nms"), "rounds": rounds, "share": middle,
            "share_min": min(shares), "share_max": max(shares),
            "respond_ms": statistics.median(entry["respond_ms"] for entry in rounds),
            "predict_ms": statistics.median(entry["predict_ms"] for entry in rounds),
            "ratio_without_postprocess": {key: ratio["point"] / (1 - middle) if middle < 1
                                          else None for key, ratio in ratios.items()}}


def table(results: list[dict[str, Any]], name: Callable[[dict[str, Any]], str]) -> str:
    """The detector cases' postprocessing beside their ratios; empty without any."""
    found = [entry for entry in results if entry.get("postprocess")]
    if not found:
        return ""
    lines = ["", f"Postprocessing inside quantmark's timed work ({WHAT}):", "",
             "| case | NMS | postprocess share of quantmark [min, max] | respond ms / batch | "
             "predict ms / batch | reference | quantmark / reference | ratio / (1 - share) |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in found:
        post = entry["postprocess"]
        for key, ratio in entry["ratios"].items():
            without = post["ratio_without_postprocess"][key]
            lines.append(f"| {name(entry)} | {post.get('nms') or '-'} | {post['share']:.3f} "
                         f"[{post['share_min']:.3f}, {post['share_max']:.3f}] | "
                         f"{post['respond_ms']:.3f} | "
                         f"{post['predict_ms']:.3f} | {key} | {ratio['point']:.3f} | "
                         f"{'-' if without is None else f'{without:.3f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sut", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--model-path", default=None, help="the run's --model-path, if any")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--samples", type=int, default=None,
                        help="distinct samples (default: the model's performance sample count)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(measure(args.sut, args.model, args.batch_size, args.threads, args.seconds,
                             args.model_path, args.samples)))


if __name__ == "__main__":
    main()
