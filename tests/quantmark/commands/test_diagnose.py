"""``run.py diagnose`` as a user types it: one-line errors, and a whole diagnosis of the
pretrained Lite0 with a recovery curve, written like a run and shown by ``run.py report``."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("args, message", [
    (("--sut", "no-such-sut"), "unknown SUT 'no-such-sut'"),
    (("--sut", "ort-int8", "--damage", "node_Conv_822"), "write LAYER=FACTOR"),
    (("--sut", "ort-int8", "--damage", "node_Conv_822=0.5"), "FACTOR above 1"),
    (("--sut", "ort-int8", "--recover", "2", "--rounds", "1"), "--rounds must be at least 2"),
    (("--sut", "ort-int8", "--against", "ort-int8"), "against itself"),
    (("--sut", "ort-fp32"), "against itself"),
    (("--sut", "ort-int8", "--samples", "0"), "--samples and --worst must be at least 1"),
    (("--sut", "ort-int8", "--dataset-path", "/no/such/folder"), "/no/such/folder"),
])
def test_bad_requests_are_one_line_errors(args, message, tmp_path, quantmark_cache):
    proc = run_cli("diagnose", *args, "--output", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory, quantmark_cache):
    out = tmp_path_factory.mktemp("diagnose")
    proc = run_cli("diagnose", "--sut", "ort-int8", "--samples", "8", "--recover", "1",
                   "--eval-samples", "64", "--rounds", "2", "--round-seconds", "0.2",
                   "--output", str(out), timeout=900)
    return proc, out


@pytest.mark.slow
def test_a_diagnosis_is_written_like_a_run(diagnosed):
    proc, out = diagnosed
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next(out.glob("*-ort-int8/efficientnet-lite0/diagnose-ort-fp32"))
    names = {path.name for path in folder.iterdir()}
    assert {"results.json", "layers.csv", "layers.md", "recovery.csv", "diagnosis.png"} <= names
    record = json.loads((folder / "results.json").read_text())
    assert record["kind"] == "diagnosis" and record["against"] == "ort-fp32"
    assert record["matched"] == {"name": len(record["layers"])}
    assert len(record["worst"]) == 10 and record["samples"] == 8
    assert all(layer["precision"] == "int8" for layer in record["layers"]
               if layer["op_type"] == "Conv")
    rows = record["recovery"]["rows"]
    assert [row["label"] for row in rows] == ["K=0", "K=1", "reference ort-fp32"]
    precision = {layer["name"]: layer["precision"] for layer in record["layers"]}
    assert rows[1]["excluded"] == [name for name in record["worst"]
                                   if precision[name] == "int8"][:1]
    assert all(row["samples"] == 64 for row in rows)
    assert record["machine"]["cpu_model"] and record["software"]
    assert "worst layers" in proc.stdout and "recovery" in proc.stdout


@pytest.mark.slow
def test_report_shows_the_diagnosis(diagnosed, tmp_path):
    proc, out = diagnosed
    assert proc.returncode == 0
    shown = run_cli("report", str(out), timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "worst layers" in shown.stdout and "recovery" in shown.stdout
    report = run_cli("report", str(out), "--output", str(tmp_path / "report"), timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Diagnosis: efficientnet-lite0: ort-int8 against ort-fp32" in markdown
    assert "### Recovery curve" in markdown
    assert (tmp_path / "report" / "figures" /
            "diagnosis-efficientnet-lite0-ort-int8-ort-fp32.png").is_file()


def test_a_failed_recovery_keeps_the_diagnosis_and_is_not_exit_0(tmp_path, monkeypatch):
    from quantmark import cli
    from quantmark.diagnosis import steps
    from quantmark.ground.errors import SutError
    from tests.report.test_diagnosis_section import _record

    record = _record(recovery_failed="K=2: NNCF could not quantize")
    del record["recovery"]
    record.update(capture={"test": {"method": "m", "precision_source": "p", "layers": 4,
                                    "notes": {}},
                           "reference": {"method": "m", "precision_source": "p", "layers": 4,
                                         "notes": {}}})
    monkeypatch.setattr(steps, "run", lambda config: dict(record))
    verb, args = cli.parse(["diagnose", "--sut", "ort-int8", "--recover", "2", "--output",
                            str(tmp_path)])
    assert verb.NAME == "diagnose"
    with pytest.raises(SutError, match="recovery curve failed .*NNCF.*diagnosis is written"):
        verb.main(args)
    written = json.loads(next(tmp_path.rglob("results.json")).read_text())
    assert written["recovery_failed"].startswith("K=2") and len(written["layers"]) == 4
    assert "RECOVERY FAILED: K=2" in next(tmp_path.rglob("layers.md")).read_text()
