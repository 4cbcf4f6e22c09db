"""A run's model label: its size where not the model's own, its dataset where the model ran on
several in the report; two datasets of one folder name are still told apart."""

from __future__ import annotations

from typing import Any

from quantmark.ground.records import RunRecord
from quantmark.report.workloads import entry_label, labeller, workload


def _record(size: str = "", dataset: str | None = None, fingerprint: str = "f1",
            model_path: str | None = None, stated: int | None = None) -> RunRecord:
    results: dict[str, Any] = {
        "config": {"sut": "ort-int8", "model": "resnet50", "input_size": size,
                   "dataset_path": dataset, "model_path": model_path},
        "sut": {"name": "ort-int8"}, "dataset": {"fingerprint": fingerprint},
        "model": {"input": {"height": stated, "width": stated}} if stated else {}}
    return RunRecord.of(results)


def test_the_models_own_size_has_no_label_another_size_has_one():
    records = [_record(), _record("224"), _record("224x224"), _record("128"),
               _record("96x128")]
    label = labeller(records)
    assert [label(r) for r in records] == ["resnet50", "resnet50", "resnet50",
                                           "resnet50 size=128", "resnet50 size=96x128"]
    assert workload(records[0]).size == (224, 224) and workload(records[4]).size == (96, 128)


def test_a_model_files_given_sizes_are_always_labelled():
    """A dynamic-size model file has no built-in size: 64 and 128 must not pool."""
    records = [_record("64", model_path="m.onnx", stated=64),
               _record("128", model_path="m.onnx", stated=128),
               _record(model_path="m.onnx", stated=32)]
    label = labeller(records)
    assert [label(r) for r in records] == ["resnet50 size=64", "resnet50 size=128",
                                           "resnet50"]


def test_datasets_are_named_only_where_they_differ_and_never_merged_by_name():
    one = [_record(dataset="/data/flowers"), _record("128", dataset="/data/flowers")]
    assert [labeller(one)(r) for r in one] == ["resnet50", "resnet50 size=128"]
    two = [_record(dataset="/data/flowers"), _record(dataset="/data/birds", fingerprint="f2"),
           _record()]
    assert [labeller(two)(r) for r in two] == ["resnet50 data=flowers", "resnet50 data=birds",
                                               "resnet50 data=built-in"]
    same_name = [_record(dataset="/a/data", fingerprint="aaaaaa1"),
                 _record(dataset="/b/data", fingerprint="bbbbbb2")]
    assert [labeller(same_name)(r) for r in same_name] == ["resnet50 data=data#aaaaaa",
                                                           "resnet50 data=data#bbbbbb"]


def test_a_cell_without_a_run_is_labelled_from_its_manifest_entry():
    assert entry_label({"model": "resnet50"}) == "resnet50"
    assert entry_label({"model": "resnet50", "input_size": "64",
                        "dataset": "/data/flowers"}) == "resnet50 size=64 data=flowers"
