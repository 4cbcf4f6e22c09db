"""The report's Diagnosis section, from a diagnosis record written like run.py diagnose's."""

from __future__ import annotations

import csv
import io
import json

from quantmark.ground.records import RESULTS, DiagnosisRecord, write_record
from quantmark.report import diagnosis_section as diagnosis


def _record(**changes) -> dict:
    """A diagnosis as ``steps.run`` returns it (what ``diagnosis.output`` types and writes)."""
    layers = [
        {"name": f"conv{i}", "op_type": "Conv", "precision": "int8" if i else "fp32",
         "reference": f"conv{i}", "reference_op": "Conv", "reference_precision": "fp32",
         "matched_by": "name", "shape": [8, 4, 4], "sqnr_db": 30.0 - 5 * i, "cosine": 0.99,
         "lost_db": float(i), "inputs": [f"conv{i - 1}"] if i else []}
        for i in range(4)]
    record = {
        "kind": "diagnosis", "model": "m", "sut": "ort-int8", "against": "ort-fp32",
        "samples": 8, "damage": [["conv2", 100.0]], "layers": layers,
        "worst": ["conv3", "conv2"], "first_jump": "conv3", "matched": {"name": 4},
        "unmatched": {"test": [], "reference": ["extra"]},
        "jump_rule": {"jump_db": 6.0, "near_worst_db": 1.0, "lossless_db": 30.0},
        "capture": {"test": {"method": "outputs <added>", "precision_source": "profiler"},
                    "reference": {"method": "x", "precision_source": "y"}},
        "exclusion": "nodes_to_exclude",
        "recovery": {"eval_samples": 64, "rounds": 3, "rows": [
            {"label": "K=0", "k": 0, "excluded": [], "top1": 50.0, "top1_change_vs_k0": None,
             "samples_per_s": {"median": 100.0, "low": 90.0, "high": 110.0},
             "speed_vs_k0": {"ratio": 1.0, "low": 1.0, "high": 1.0}, "speed_lost_pct": 0.0,
             "top1_per_speed_point": None, "disturbed_rounds": 0},
            {"label": "K=1", "k": 1, "excluded": ["conv3"], "top1": 60.0,
             "top1_change_vs_k0": {"points": 10.0, "low": 5.0, "high": 15.0},
             "samples_per_s": {"median": 90.0, "low": None, "high": None},
             "speed_vs_k0": {"ratio": 0.9, "low": 0.85, "high": 0.95},
             "speed_lost_pct": 10.0, "top1_per_speed_point": 1.0, "disturbed_rounds": 1}]}}
    record.update(changes)
    return record


def _typed(**changes) -> DiagnosisRecord:
    return DiagnosisRecord.from_dict(_record(**changes))


def test_load_reads_diagnoses_and_skips_what_it_cannot_read(tmp_path, caplog):
    """Only diagnosis folders are read (``<model>/diagnose-<against>/``), never a run's."""
    model = tmp_path / "host-ort-int8" / "m"
    for name in ("diagnose-a", "diagnose-b", "diagnose-c", "diagnose-d", "Offline"):
        (model / name).mkdir(parents=True)
    write_record(model / "diagnose-a" / RESULTS, _typed())
    old = _record()
    del old["layers"][0]["lost_db"]
    (model / "diagnose-b" / RESULTS).write_text(json.dumps(old))  # a legacy layer: skipped
    (model / "diagnose-c" / RESULTS).write_text("{")  # cut short: skipped, said
    (model / "Offline" / RESULTS).write_text("{")  # a run's folder: never opened
    (tmp_path / ".tmp" / "diagnose-a").mkdir(parents=True)
    write_record(tmp_path / ".tmp" / "diagnose-a" / RESULTS, _typed())  # in progress
    found = diagnosis.load([tmp_path])
    assert [record.folder for record in found] == [model / "diagnose-a"]
    assert found[0] == _typed() and found[0].kind == "diagnosis"
    assert "cannot read" in caplog.text and "diagnose-c" in caplog.text
    assert "Offline" not in caplog.text
    assert diagnosis.load([model / "diagnose-a"]) == found  # its own folder, as diagnose reads it


def test_a_diagnosis_of_the_previous_main_loads(tmp_path):
    """The previous main wrote the same fields with a kind and no schema."""
    folder = tmp_path / "h-ort-int8" / "m" / "diagnose-ort-fp32"
    folder.mkdir(parents=True)
    (folder / RESULTS).write_text(json.dumps({**_record(), "figure": None, "config": {}}))
    [record] = diagnosis.load([tmp_path])
    assert (record.schema, record.sut, record.worst) == (2, "ort-int8", ["conv3", "conv2"])


def test_tables_name_the_worst_layers_and_the_curve():
    record = _typed()
    rows = list(csv.DictReader(io.StringIO(diagnosis.layers_csv(record))))
    assert [row["worst_rank"] for row in rows] == ["", "", "2", "1"]
    assert rows[3]["shape"] == "8x4x4"
    worst = diagnosis.worst_rows(record)
    assert worst[0][:4] == ["1", "conv3 (first jump)", "Conv", "int8"]
    curve = list(csv.reader(io.StringIO(diagnosis.recovery_csv(record))))
    assert curve[2][:4] == ["K=1", "1", "60.00", "+10.00 [+5.00, +15.00]"]
    assert curve[2][4] == "90.0 (1 disturbed)"  # no interval: the point alone, flagged
    markdown = "\n".join(diagnosis.markdown(record))
    assert "damaged conv2 x100" in markdown and "### Recovery curve (64 samples" in markdown
    assert "first jump" in markdown and "nodes_to_exclude" in markdown
    assert "1 of ort-fp32" in markdown  # the unmatched reference layer is counted
    assert "&lt;added&gt;" in diagnosis.to_html(record)


def test_the_figure_is_drawn_with_and_without_a_curve(tmp_path):
    assert diagnosis.draw(_typed(), tmp_path / "a.png").stat().st_size > 1000
    plain = _typed(recovery=None)
    assert diagnosis.draw(plain, tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    assert diagnosis.figures([plain]) == []  # not loaded from a folder: no figure to show
    plain.figure, plain.source = "b.png", tmp_path / RESULTS
    figures = diagnosis.figures([plain])
    assert len(figures) == 1 and figures[0].png[:4] == b"\x89PNG"


def test_agreement_puts_each_suts_worst_layers_under_the_references_names():
    ort = _typed()  # worst conv3, conv2, all named as the reference names them
    ov = _typed(sut="ov-int8", worst=["l2", "l1"])
    for layer, reference in zip(ov.layers, ("conv0", "conv1", "conv2", "conv3"),
                                strict=True):
        layer["name"], layer["reference"] = f"l{reference[-1]}", reference
    lone = _typed(against="other-fp32")  # no second diagnosis against other-fp32
    [(heading, header, rows)] = diagnosis.agreement([ort, ov, lone])
    assert "named as ort-fp32 names them" in heading
    assert header == ["ort-fp32 layer", "ort-int8", "ov-int8", "among the worst of"]
    # by best rank, then by how many SUTs rank the layer among their worst
    assert rows == [["conv2", "2", "1", "2 of 2"], ["conv3", "1", "-", "1 of 2"],
                    ["conv1", "-", "2", "1 of 2"]]
    assert "## Diagnosis agreement" in "\n".join(diagnosis.agreement_markdown([ort, ov]))


def test_a_curve_priced_in_ms_shows_costs_order_and_predicted_against_measured():
    record = _record()
    rows = record["recovery"]["rows"]
    rows[0].update(ms_per_batch={"median": 80.0, "low": 75.0, "high": 85.0}, predicted_ms=80.0,
                   prediction_error_pct=0.0, top1_per_ms=None, prediction_unknown="")
    rows[1].update(ms_per_batch={"median": 88.0, "low": None, "high": None}, predicted_ms=84.0,
                   prediction_error_pct=-4.56, top1_per_ms=1.25, prediction_unknown="")
    record["recovery"].update(recover_by="ms", order=["conv3"], batch_size=8, candidates=[
        {"name": "conv3", "op_type": "Conv", "lost_db": 3.0, "cost_ms": 4.0, "int8_ms": 1.0,
         "float_ms": 5.0, "db_per_ms": 0.75, "matched_by": "name", "why": ""},
        {"name": "conv2", "op_type": "Conv", "lost_db": 2.0, "cost_ms": None, "int8_ms": None,
         "float_ms": None, "db_per_ms": None, "matched_by": "", "why": "no row"}],
        costs={"unknown": ["conv2"], "why_unknown": ""})
    typed = DiagnosisRecord.from_dict(record)
    curve = list(csv.DictReader(io.StringIO(diagnosis.recovery_csv(typed))))
    assert (curve[1]["ms_per_batch"], curve[1]["predicted_ms"]) == ("88.000", "84.000")
    assert (curve[1]["prediction_error_pct"], curve[1]["top1_per_ms"]) == ("-4.6", "1.25")
    assert curve[1]["recover_by"] == "ms" and curve[1]["excluded_cost_ms"] == "conv3=4.0000"
    assert diagnosis.cost_rows(typed) == [
        ["1", "conv3", "Conv", "3.0", "1.0000", "5.0000", "+4.0000", "0.8", "name", ""],
        ["2", "conv2", "Conv", "2.0", "", "", "unknown", "", "", "no row"]]
    lines = diagnosis.summary_lines(typed)
    assert "recovery order: --recover-by ms (SQNR recovered per ms" in lines[-2]
    assert lines[-1] == "recovery cost unknown for 1 of 2 candidate layers (first: conv2: no row)"
    markdown = "\n".join(diagnosis.markdown(typed))
    assert "### Recovery candidates priced in ms (batch 8), ordered by SQNR recovered per ms" \
        in markdown
    assert "Recovery candidates priced" in diagnosis.to_html(typed)
