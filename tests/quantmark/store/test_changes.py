"""What changed between the newest job's environment and its baseline's: every differing key,
ranked by the rank table (settings and the artifact first), keys that changed only at the
newest job first within a rank, measurements and paths never listed."""

from __future__ import annotations

from quantmark.store.changes import (
    RANKS,
    Change,
    baseline_value,
    changes_text,
    ignored,
    rank_of,
    what_changed,
)
from quantmark.store.points import Point, SeriesKey

ORT = SeriesKey("resnet50", "ort-int8", "Offline", "samples_per_s")
BEFORE = {"settings.threads": 2, "settings.batch_size": 8, "software.onnxruntime": "1.19.2",
          "software.torch": "2.4.0", "software.quantmark": "0.1.0",
          "machine.cpu_model": "AMD EPYC 7B13", "machine.cpu_flags": "avx2,fma",
          "machine.os": "Linux-6.1", "machine.governor": "performance",
          "fingerprint.artifact_sha256": "aaaa", "dataset.fingerprint": "d1",
          "settings.measurement.latency_s": 0.04, "dataset.path": "/data/a"}
EVERYTHING = {"settings.threads": 1, "settings.batch_size": 8, "software.onnxruntime": "1.20.0",
              "software.torch": "2.5.0", "software.quantmark": "0.2.0",
              "machine.cpu_model": "Intel Xeon", "machine.cpu_flags": "avx2,avx512f",
              "machine.os": "Linux-6.8", "machine.governor": "powersave",
              "fingerprint.artifact_sha256": "bbbb", "dataset.fingerprint": "d2",
              "settings.measurement.latency_s": 0.05, "dataset.path": "/data/b"}


def _point(environment: dict, key: SeriesKey = ORT, job: str = "j") -> Point:
    return Point(key, job, "2026-01-01T00:00:00Z", 1.0, None, None, (1.0,),
                 environment=dict(environment))


def test_everything_changed_is_listed_in_the_rank_tables_order():
    changes = what_changed(_point(EVERYTHING), [_point(BEFORE)] * 3)
    assert [c.key for c in changes] == [
        "settings.threads", "fingerprint.artifact_sha256", "software.onnxruntime",
        "machine.cpu_flags", "machine.cpu_model", "machine.os", "machine.governor",
        "software.torch", "software.quantmark", "dataset.fingerprint"]
    assert [c.group for c in changes][:3] == ["run settings", "the artifact",
                                              "the SUT's framework"]


def test_a_planted_thread_change_is_named_first_and_read_as_written():
    newest = dict(BEFORE, **{"settings.threads": 1, "software.onnxruntime": "1.20.0"})
    changes = what_changed(_point(newest), [_point(BEFORE)] * 4)
    assert changes_text(changes) == ("what changed: settings.threads 2 -> 1; "
                                     "software.onnxruntime 1.19.2 -> 1.20.0")


def test_the_suts_own_framework_outranks_the_others():
    """For a TFLite SUT, tflite's version is its framework's; onnxruntime is other software."""
    tflite = SeriesKey("resnet50", "tflite-int8", "Offline", "samples_per_s")
    framework = ("software.tflite", "software.ai-edge-litert", "software.tensorflow")
    assert rank_of("software.tflite", framework) < rank_of("machine.cpu_model", framework)
    assert rank_of("software.onnxruntime", framework) > rank_of("machine.os", framework)
    before = dict(BEFORE, **{"software.tflite": "2.17", "sut.framework": "tflite"})
    after = dict(before, **{"software.tflite": "2.18", "software.onnxruntime": "1.20.0"})
    keys = [c.key for c in what_changed(_point(after, tflite), [_point(before, tflite)])]
    assert keys == ["software.tflite", "software.onnxruntime"]


def test_a_key_that_changed_only_now_comes_before_one_that_always_varied():
    """Within one rank: the thread count, steady over the baseline, before the workers, which
    already moved between baseline jobs."""
    history = [_point(dict(BEFORE, **{"settings.workers": w})) for w in (1, 2, 2)]
    newest = _point(dict(BEFORE, **{"settings.workers": 4, "settings.threads": 1}))
    changes = what_changed(newest, history)
    assert [(c.key, c.only_newest) for c in changes] == [("settings.threads", True),
                                                         ("settings.workers", False)]
    assert changes[1].old == 2  # the majority of the baseline


def test_the_baseline_value_is_the_majority_the_latest_on_a_tie():
    history = [_point({"k": v}) for v in ("a", "b", "b", "a", "c")]
    assert baseline_value("k", history) == ("a", False)
    assert baseline_value("k", [_point({"k": 1})] * 3) == (1, True)
    assert baseline_value("absent", [_point({})]) == (None, True)


def test_keys_that_appear_or_vanish_are_changes():
    changes = what_changed(_point({"software.openvino": "2024.4"}), [_point({"x.y": 1})])
    assert [c.text() for c in changes] == ["software.openvino (none) -> 2024.4",
                                           "x.y 1 -> (none)"]


def test_lists_show_what_they_gained_and_lost():
    """As lists, or as the store keeps the CPU flags: joined with ","."""
    change = Change("machine.cpu_flags", ["avx2", "fma"], ["avx2", "avx512f"], 3, True)
    assert change.text() == "machine.cpu_flags +avx512f -fma"
    joined = Change("machine.cpu_flags", "avx2,fma", "avx2,avx512f", 3, True)
    assert joined.text() == "machine.cpu_flags +avx512f -fma"
    assert Change("machine.cpu_model", "a,b", "a,c", 3, True).text() == \
        "machine.cpu_model a,b -> a,c"


def test_measurements_and_paths_are_not_changes():
    assert ignored("settings.measurement.latency_s") and ignored("dataset.path")
    assert ignored("config.dataset_path") and not ignored("settings.threads")
    same = dict(BEFORE, **{"settings.measurement.latency_s": 9.0, "dataset.path": "/x"})
    assert what_changed(_point(same), [_point(BEFORE)]) == []
    assert changes_text([]) == "what changed: nothing recorded in the environment"


def test_no_baseline_no_changes_and_long_lists_are_cut():
    assert what_changed(_point(EVERYTHING), []) == []
    changes = what_changed(_point(EVERYTHING), [_point(BEFORE)])
    assert changes_text(changes, limit=2).endswith(f"; and {len(changes) - 2} more")


def test_every_rank_is_named_and_unknown_keys_rank_last():
    assert len({name for name, _ in RANKS}) == len(RANKS)
    assert rank_of("something.new") == len(RANKS) - 1
    assert rank_of("software.quantmark") > rank_of("software.torch")
    assert rank_of("sut.threads") == rank_of("speed.placement") == 0
    assert rank_of("fingerprint.source_hash") == rank_of("calibration.fingerprint") == 1
