"""A text accuracy run scored and recorded: its answers against the FP32 reference
(``scoring``), the per-sentence outcomes two runs are later paired on, ``accuracy.txt``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.metric import Metric
from quantmark.tasks.accuracy_log import ACCURACY_LOG
from quantmark.tasks.text import scoring

SCORES_FILE = scoring.SCORES_FILE
#: the per-sentence outcome a metric's paired change is taken over
PAIRED_OUTCOME = {"cosine": "cosine", "accuracy": "correct"}


def reference_for(prepared: Any) -> np.ndarray:
    """The FP32 model's outputs on the run's scored sentences (cached and sealed)."""
    from quantmark.ground.paths import cache_dir
    from quantmark.models.text_graph import read_text_model

    # the file this run was given, read as the run read it (whatever the SUT ran: a torch
    # module, an IR), not a cached artifact's meta
    model_file = prepared.dataset.model_file
    stated = read_text_model(model_file, str(model_file), prepared.spec.head)
    return scoring.reference_outputs(model_file, stated.inputs, stated.output_name,
                                     prepared.dataset.tokens.tokens, cache_dir("text-references"))


def score_run(work: Path, prepared: Any, metric: Metric) -> dict[str, Any]:
    """The run's figures with their intervals (the record's accuracy), its outcomes file and
    ``accuracy.txt``; ``missing`` alone where samples have no answer."""
    data, spec = prepared.dataset, prepared.spec
    width = spec.num_classes if spec.head == "embedding" else None
    answers, missing = scoring.read_answers(work / ACCURACY_LOG, prepared.qsl.total_count, width)
    if missing:
        return {"missing": missing}
    reference = reference_for(prepared)
    if spec.head == "embedding":
        outcomes = scoring.embedding_outcomes(answers, reference)
        figures = {"cosine": scoring.mean_interval(outcomes["cosine"]),
                   "retrieval_agreement": scoring.mean_interval(outcomes["retrieval_agrees"])}
        target = scoring.target_line(figures["cosine"], 100.0, "mean cosine to FP32")
    else:
        outcomes = scoring.classifier_outcomes(answers, reference, data.labels)
        figures = {"accuracy": scoring.mean_interval(outcomes["correct"]),
                   "agreement": scoring.mean_interval(outcomes["agrees"])}
        reference_accuracy = 100.0 * float(outcomes["reference_correct"].mean())
        target = scoring.target_line(figures["accuracy"], reference_accuracy, "accuracy")
        target["reference_accuracy"] = reference_accuracy
    _write_outcomes(work, data.fingerprint(), spec.head, outcomes)
    lines = [f"{name}: {figure.text()} over {len(answers)} sentences (95% bootstrap)"
             for name, figure in figures.items()]
    lines += [f"target: {target['rule']}: {target['verdict']}",
              f"sequence length {spec.seq_len}, padding {spec.padding}"]
    atomic_write_text(work / "accuracy.txt", scoring.accuracy_text(lines))
    found: dict[str, Any] = {metric.key: figures[metric.key].value}
    for name, figure in figures.items():
        found[name] = figure.value
        found[f"{name}_interval"] = [figure.low, figure.high]
    return {**found, "sentences": len(answers), "target": target,
            "lengths": data.lengths, "padding": spec.padding}


def _write_outcomes(work: Path, fingerprint: str, head: str,
                    outcomes: dict[str, np.ndarray]) -> None:
    atomic_write_text(work / SCORES_FILE, json.dumps({
        "head": head, "fingerprint": fingerprint,
        "outcomes": {name: [float(v) for v in values] for name, values in outcomes.items()}}))


def paired(baseline: dict[str, Any], candidate: dict[str, Any], key: str
           ) -> dict[str, Any] | None:
    """The candidate's change in ``key`` against the baseline, sentence by sentence; None
    where the two scored other sentences or lack the outcome."""
    outcome = PAIRED_OUTCOME.get(key)
    if baseline.get("fingerprint") != candidate.get("fingerprint") or outcome is None:
        return None
    base = baseline.get("outcomes", {}).get(outcome)
    cand = candidate.get("outcomes", {}).get(outcome)
    if base is None or cand is None or len(base) != len(cand):
        return None
    change = scoring.paired_difference(np.asarray(base), np.asarray(cand))
    return {"delta": change.value, "low": change.low, "high": change.high, "count": len(base),
            "baseline": 100.0 * float(np.mean(base)), "candidate": 100.0 * float(np.mean(cand))}
