"""``run.py profile --sut tflite-int8`` as a user runs it on the digits CNN: with no LiteRT tool
that profiles ops (ai-edge-litert 2.x ships none), every op is timed in isolation through the
interpreter and the per-layer table, the shares and the sum check are printed. (The zoo's digits
CNN, trained into the test cache: the tests' 32x32 RGB digits model is another network.)"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")

from quantmark.ground.errors import SutError  # noqa: E402
from quantmark.ground.records import load_record  # noqa: E402
from quantmark.sut.tflite import profile as tfl_profile  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def _has_tool() -> bool:
    try:
        tfl_profile.find_tool()
    except SutError:
        return False
    return True


@pytest.mark.slow
def test_profile_prints_the_tflite_int8_table(tmp_path: Path) -> None:
    proc = run_cli("profile", "--sut", "tflite-int8", "--model", "digits-cnn", "--iterations",
                   "5", "--warmup", "1", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next(tmp_path.glob("*-tflite-int8/digits-cnn/profile-tflite-int8-vs-tflite-fp32"))
    record = load_record(folder / "results.json", kind="profile")
    assert record.unsupported == {}  # both sides profiled
    for side, precision in ((record.test, "int8"), (record.reference, "fp32")):
        convs = [row for row in side["layers"] if row["op_type"] == "CONV_2D"]
        assert len(convs) >= 2 and all(row["median_ms"] > 0 for row in convs)
        # net of an empty invoke: a reshape may come to nothing, never below
        assert all(row["median_ms"] >= 0 for row in side["layers"])
        assert {row["precision"] for row in convs} == {precision}
        if not _has_tool():
            assert "each op timed in isolation (one-op models), not in situ" in side["method"]
            assert "each op timed in isolation through the interpreter" in \
                side["notes"]["path"]
    assert record.test["shares"]["int8_compute_share"] > 0
    assert record.reference["shares"]["int8_compute_share"] == 0
    assert "every layer: tflite-int8 against tflite-fp32, digits-cnn" in proc.stdout
    assert (folder / "layers.csv").read_text().count(",int8,") >= 4  # every conv and FC row
    assert "tflite-int8: INT8 compute" in proc.stdout and "layers sum to" in proc.stdout
