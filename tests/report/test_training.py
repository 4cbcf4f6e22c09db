"""train-bench records in reports: read through the one loader, typed; a record the previous
main wrote (schema 1) still reads, and a broken one is left out with a warning."""

from __future__ import annotations

import json

from quantmark.report import training


def _raw(precision: str, step_s: float, peak_mb: float) -> dict:
    """A train-bench JSON as the previous main wrote it (kind, schema 1)."""
    return {"kind": "train-bench", "schema": 1, "framework": "torch", "model": "m",
            "precision": precision, "device": "cpu", "device_name": "cpu x", "batch_size": 4,
            "image_size": 64, "steps": 3, "warmup": 1, "warmup_steps": 1,
            "executed_precision": "fp32" if precision == "fp32" else "bf16 autocast",
            "times": {"first_step_s": 0.5, "warmup_s": 0.6},
            "step_time_s": {"median": step_s, "mean": step_s, "p90": step_s},
            "images_per_s": 4 / step_s, "memory": {"kind": "cpu", "peak_mb": peak_mb,
                                                   "source": "ru_maxrss"},
            "amp": {"evidence": {"compute_dtype": "bfloat16"}}, "loss_first": 7.0,
            "loss_last": 6.0, "loss_finite": True, "losses": [7.0, 6.0],
            "machine": {"hostname": "box"}, "software": {"torch": "2"}}


def test_records_of_the_previous_main_read_typed_and_pair_amp_with_fp32(tmp_path, caplog):
    for precision, step_s, peak in (("fp32", 0.2, 500.0), ("amp", 0.1, 400.0)):
        (tmp_path / f"torch-m-b4-s64-{precision}.json").write_text(
            json.dumps(_raw(precision, step_s, peak)))
    (tmp_path / "torch-other-b4-fp32.json").write_text("{")  # cut short
    (tmp_path / "notes.json").write_text("[]")  # not a train-bench name: never opened
    records = training.load([tmp_path])
    assert [(r.kind, r.schema, r.precision) for r in records] == [
        ("train-bench", 2, "fp32"), ("train-bench", 2, "amp")]
    assert records[1].extra["losses"] == [7.0, 6.0]  # what the report does not read, kept
    assert "torch-other-b4-fp32.json" in caplog.text and "notes.json" not in caplog.text
    amp = training.rows(records)[1]
    assert amp["step_time_vs_fp32"] == 0.5 and amp["memory_vs_fp32"] == 0.8
    assert amp["compute_dtype"] == "bfloat16" and amp["system"] == "box"
    assert amp["path"] == str(tmp_path / "torch-m-b4-s64-amp.json")
