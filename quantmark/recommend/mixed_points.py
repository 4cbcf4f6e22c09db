"""The diagnosis's mixed-precision points in ``run.py recommend`` (``--recover K``).

Where an INT8 candidate's accuracy breaks ``--max-accuracy-drop`` by its point, the search
gets that SUT's way back: the diagnosis ranks the SUT's layers by the SQNR each loses against
its framework's FP32 (``diagnosis.steps``, the ranking ``run.py diagnose`` lists, on a few
samples), and the candidate comes back with its worst K = 1, 2, 4 ... ``recover`` layers kept
in float (``diagnosis.recovery.curve_points``), with its batch, threads and options. Each point
is then measured like any candidate: ``run.py`` builds it through the framework's own
exclusion (``--sut-option keep_float=...``), its accuracy is run once per artifact, and the
race judges it by the same rules; what the diagnosis took counts against the budget.

Only a SUT whose framework can rebuild it with layers excluded gets points
(``sut.registry.takes_keep_float``); each SUT is diagnosed once, from the candidate of it that
is best by point and was not dropped as too slow (its points are slower still).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from quantmark.recommend import judging
from quantmark.recommend.candidates import Candidate, Evidence
from quantmark.recommend.staging import NOT_MEASURED

if TYPE_CHECKING:
    from quantmark.recommend.candidates import SearchConfig

log = logging.getLogger(__name__)

#: evaluation samples the diagnosis captures layer by layer: the ranking needs few (``run.py
#: diagnose`` captures 32 by default); every one costs two models' inference of all layers
DIAGNOSIS_SAMPLES = 64
#: a failed diagnosis' one line is cut to this many characters
WHY_CHARS = 300


@dataclass(frozen=True)
class Ranking:
    """A SUT's excludable INT8 layers, worst first, and what finding them took."""

    layers: tuple[str, ...]
    seconds: float
    why: str = ""  # why there is none ("" when the diagnosis ran)


class LayerRanker(Protocol):
    """Who says which SUTs can keep layers in float and ranks their layers: the diagnosis
    (``DiagnosisRanker``), or a measurer that plants them (``worst_layers``: the tests)."""

    def takes_keep_float(self, sut: str) -> bool: ...

    def worst_layers(self, candidate: Candidate, count: int) -> Ranking: ...


class DiagnosisRanker:
    """The diagnosis of ``run.py diagnose`` on the measurer's model and dataset: the SUT
    against its framework's FP32 on ``samples`` evaluation samples, in this process."""

    def __init__(self, measurer: Any, samples: int = DIAGNOSIS_SAMPLES) -> None:
        self.measurer = measurer
        self.samples = samples

    def takes_keep_float(self, sut: str) -> bool:
        from quantmark.sut.registry import SUTS, availability, takes_keep_float

        info = SUTS.get(sut)
        return info is not None and takes_keep_float(info) and availability(info)[0]

    def worst_layers(self, candidate: Candidate, count: int) -> Ranking:
        """The worst ``count`` layers; a diagnosis that fails is a ``why``, never an
        exception (the search goes on without this SUT's points)."""
        started = time.monotonic()
        try:
            layers = ranked_layers(self.diagnose_config(candidate), count)
        except Exception as exc:  # noqa: BLE001 - a framework's fault (or a task the
            # diagnosis cannot run on yet) ends no search: one line, and it goes on
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            why = f"{type(exc).__name__}: {lines[-1] if lines else 'failed'}"[:WHY_CHARS]
            log.warning("%s: no mixed-precision points: run.py diagnose cannot rank its layers "
                        "(%s)", candidate.sut, why)
            return Ranking((), time.monotonic() - started, why)
        return Ranking(layers, time.monotonic() - started)

    def diagnose_config(self, candidate: Candidate) -> Any:
        """``run.py diagnose --sut SUT --samples N`` with the measurer's model, dataset and
        run-wide settings (its input size, classes, preprocessing, labels, calibration)."""
        from quantmark.diagnosis.steps import DiagnoseConfig

        template = self.measurer.template
        return DiagnoseConfig(
            model=self.measurer.model, sut=candidate.sut, samples=self.samples,
            worst=1, threads=candidate.threads, dataset_path=template.dataset_path,
            model_path=template.model_path, calibration_list=template.calibration_list,
            input_size=self.measurer.input_size, num_classes=template.num_classes,
            preprocess=dict(template.preprocess), labels=template.labels,
            seq_len=self.measurer.seq_len, padding=template.padding,
            tokenizer=template.tokenizer)


def ranked_layers(config: Any, count: int) -> tuple[str, ...]:
    """The worst ``count`` layers of ``config.sut`` that run quantized and that its framework
    can keep in float, as ``run.py diagnose`` ranks them (``diagnosis.steps.excludable``)."""
    from quantmark.diagnosis import steps
    from quantmark.models.workload import resolve_spec

    # the run's task resolves the spec and the model file (a built-in detector's exported
    # ONNX) where the diagnosis knows tasks; a classifier's spec as before otherwise
    resolve = getattr(steps, "resolve", None)
    if resolve is not None:
        spec, config, _ = resolve(config)
    else:
        spec = resolve_spec(config)
    reference = steps.reference_name(config)
    data, calibration = steps.open_data(config, spec)
    steps.check(config, reference, len(data.labels))
    test = steps.build(config, config.sut, spec, calibration)
    try:
        ref = steps.build(config, reference, spec, calibration)
        try:
            matching, _ = steps.capture_errors(config, data, test, ref)
        finally:
            ref[0].close()
    finally:
        test[0].close()
    return tuple(steps.excludable(matching.pairs, count))


def breaks_accuracy(item: Evidence, config: SearchConfig) -> bool:
    """Its accuracy change lies beyond ``--max-accuracy-drop`` by its point: broken by its
    interval, or leaning that way where the set cannot tell. This only chooses where the
    search looks for a way back, never a verdict: the points it adds are judged by their
    intervals like every candidate (``judging.limit_state``), and one whose accuracy merely
    cannot be told is neither dropped nor recommended for it. A failed accuracy run, NaN,
    breaks nothing: it says nothing of what float layers would win back; nor does a change
    whose set is too small to judge any limit (crops of too few source images): no point
    could be told to meet it either, and its runs would spend the budget for nothing."""
    bound = config.limits.max_accuracy_drop
    found = judging.span(item, "max_accuracy_drop", config) if bound is not None else None
    return (found is not None and found.can_drop
            and judging.margin(found.point, "max_accuracy_drop", bound) > 0)


def _too_slow(item: Evidence) -> bool:
    """Dropped on the objective (or held behind a base too far behind): a point keeping layers
    in float is slower still."""
    return item.dropped.startswith((judging.OBJECTIVE_DROP, NOT_MEASURED))


def to_recover(evidence: Sequence[Evidence], config: SearchConfig,
               ranker: LayerRanker) -> list[Evidence]:
    """Per SUT that gets points now, the candidate they copy: a SUT with no point yet, that
    can keep layers in float, and whose accuracy breaks the limit; of its candidates not too
    slow, the best by point (those without a figure last, in the space's order)."""
    expanded = {item.candidate.sut for item in evidence if item.candidate.keep_float}
    sign = -1.0 if config.higher_is_better else 1.0
    chosen: dict[str, tuple[tuple[bool, float, int], Evidence]] = {}
    for index, item in enumerate(evidence):
        sut = item.candidate.sut
        if item.candidate.keep_float or sut in expanded or _too_slow(item) \
                or not breaks_accuracy(item, config) or not ranker.takes_keep_float(sut):
            continue
        found = judging.figure(item, config.objective, config)
        order = (found is None, sign * found.point if found else 0.0, index)
        if sut not in chosen or order < chosen[sut][0]:
            chosen[sut] = (order, item)
    return [item for _, item in chosen.values()]


def points(candidate: Candidate, layers: Sequence[str], recover: int) -> list[Candidate]:
    """``candidate`` with its worst K = 1, 2, 4 ... ``recover`` layers kept in float (fewer
    layers ranked: each distinct set once)."""
    from quantmark.diagnosis.recovery import curve_points

    sets = dict.fromkeys(tuple(layers[:k]) for k in curve_points(recover)[1:])
    return [replace(candidate, keep_float=kept) for kept in sets if kept]


def spent(evidence: Sequence[Evidence]) -> float:
    """The seconds the evidence's runs and accuracy runs (each artifact once) took."""
    accuracies = {item.candidate.artifact: item.accuracy.seconds for item in evidence
                  if item.accuracy is not None}
    return sum(run.seconds for item in evidence for run in item.runs) + sum(accuracies.values())


def measuring(measurer: Any) -> Any:
    """The measurer that measures, inside the wrappers the search may be given (the
    journal's ``RecordingMeasurer`` holds it as ``inner``)."""
    while hasattr(measurer, "inner") and not hasattr(measurer, "worst_layers") \
            and not hasattr(measurer, "template"):
        measurer = measurer.inner
    return measurer


#: measurer -> {SUT: its ranking}: each SUT is diagnosed once per search, also when its
#: diagnosis found no point (it would find none again)
_RANKED: weakref.WeakKeyDictionary[Any, dict[str, Ranking]] = weakref.WeakKeyDictionary()


def notes(measurer: Any) -> list[str]:
    """One line per SUT whose layers the diagnosis could not rank in this search (a
    framework's fault, or a task ``run.py diagnose`` cannot run on yet): the answer says so."""
    return [f"{sut}: no mixed-precision points: run.py diagnose cannot rank its layers "
            f"({ranking.why})" for sut, ranking in _RANKED.get(measurer, {}).items()
            if ranking.why]


def mixed_points(evidence: Sequence[Evidence], measurer: Any, config: SearchConfig,
                 spent_s: float | None = None) -> tuple[list[Candidate], float]:
    """The new candidates the search appends to its race, and the seconds their diagnosis
    took (the budget's). Called after each accuracy result; each SUT is diagnosed once.

    A SUT is diagnosed only while the budget (``spent_s``: what the search has spent, else
    what the evidence's runs took) still holds the diagnosis (priced as the SUT's accuracy
    run) and one point's accuracy and ``min_runs`` runs, each priced as the broken
    candidate's own took."""
    if not config.recover or config.limits.max_accuracy_drop is None:
        return [], 0.0
    inner = measuring(measurer)
    ranker = inner if hasattr(inner, "worst_layers") else DiagnosisRanker(inner)
    ranked = _RANKED.setdefault(measurer, {})
    used = spent(evidence) if spent_s is None else spent_s
    added: list[Candidate] = []
    seconds = 0.0
    for item in to_recover(evidence, config, ranker):
        if item.candidate.sut in ranked:
            continue
        accuracy = item.accuracy.seconds if item.accuracy is not None else 0.0
        run = max([r.seconds for r in item.runs] or [config.run_seconds + config.start_s])
        need = 2 * accuracy + config.min_runs * run
        if used + seconds + need > config.budget_s:
            log.info("%s: no mixed-precision points: the budget left (%.0f s) holds no "
                     "diagnosis and point (~%.0f s)", item.candidate.sut,
                     config.budget_s - used - seconds, need)
            continue
        ranking = ranked[item.candidate.sut] = ranker.worst_layers(item.candidate,
                                                                   config.recover)
        seconds += ranking.seconds
        found = points(item.candidate, ranking.layers, config.recover)
        log.info("%s: accuracy change beyond the limit by its point: %s", item.candidate.key,
                 f"{len(found)} mixed-precision points" if found else
                 f"no mixed-precision point ({ranking.why or 'no excludable INT8 layer'})")
        added += found
    return added, seconds
