"""``run.py profile`` as a user runs it: its folder, its typed record, its tables named by the
canonical ONNX layers, several references side by side, a framework without a profiler said in
one line, a planted slow layer ranked first against the original model, and bad requests
refused in one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from quantmark.diagnosis.profile_run import ProfileConfig, references, run
from quantmark.ground.errors import UserError
from quantmark.ground.records import load_record
from tests.conftest import run_cli
from tests.quantmark.diagnosis.planted_models import MODEL, SLOWED, original_onnx, plant_slow_conv
from tests.quantmark.run.test_checks import one_line_error

QUICK = ("--model", "digits-cnn", "--iterations", "5", "--warmup", "1")
ONNX_LAYERS = {"node_conv2d", "node_conv2d_1", "node_max_pool2d", "node_Reshape_7",
               "node_linear", "node_linear_1"}  # digits-cnn's compute nodes, relus folded


def test_a_profile_is_written_like_a_run(tmp_path: Path) -> None:
    proc = run_cli("profile", "--sut", "ort-int8", *QUICK, "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next(tmp_path.glob("*-ort-int8/digits-cnn/profile-ort-int8-vs-ort-fp32"))
    for name in ("results.json", "layers.csv", "profile.png"):
        assert (folder / name).is_file(), name
    record = load_record(folder / "results.json", kind="profile")
    assert record.against == "ort-fp32" and record.iterations == 5
    assert record.references == ["ort-fp32"] and record.figure == "profile.png"
    assert record.test["shares"]["int8_compute_share"] > 0
    assert record.reference["shares"]["int8_compute_share"] == 0
    convs = [row for row in record.layers if row["test"] and "Conv" in row["test"]["op_type"]]
    assert convs and all(row["reference"] for row in convs)  # every conv paired with FP32's
    # one vocabulary: every row named by the canonical ONNX model's layer
    assert Path(record.onnx_model).name == "digits-cnn-fp32.onnx"
    assert {row["onnx_layer"] for row in record.layers} == ONNX_LAYERS
    assert all(row["matched_by"] == "onnx layer" for row in record.layers)
    assert "ONNX layer" in proc.stdout and "node_conv2d_1" in proc.stdout
    assert "ort-int8: INT8 compute" in proc.stdout and "layers sum to" in proc.stdout
    assert (folder / "layers.csv").read_text().startswith("ONNX_layer,")


def _with_plugin(site: Path) -> dict[str, str]:
    """The environment in which the trivial framework (it has no profiler) is installed."""
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_a_framework_without_a_profiler_is_one_line_and_the_other_side_reports(
        tmp_path: Path, trivial_plugin_path: Path) -> None:
    proc = run_cli("profile", "--sut", "trivial-fp32", "--against", "ort-fp32", *QUICK,
                   "--output", str(tmp_path), env=_with_plugin(trivial_plugin_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trivial-fp32: not profiled: trivial (trivial-fp32) has no per-layer profiler" in \
        proc.stdout
    assert "ort-fp32: INT8 compute 0%" in proc.stdout


@pytest.mark.slow  # three SUTs quantized and profiled (~20 s on a busy machine)
def test_several_references_sit_side_by_side_and_one_without_a_profiler_is_one_line(
        tmp_path: Path, trivial_plugin_path: Path) -> None:
    pytest.importorskip("openvino")
    env = _with_plugin(trivial_plugin_path)
    proc = run_cli("profile", "--sut", "ort-int8", "--against", "ort-fp32,trivial-fp32,ov-int8",
                   *QUICK, "--output", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trivial-fp32: not profiled: trivial (trivial-fp32) has no per-layer profiler" in \
        proc.stdout
    assert "ov-int8: INT8 compute" in proc.stdout and "every SUT by ONNX layer" in proc.stdout
    assert "ort-int8 ms ┃ ort-fp32 ms ┃ ov-int8 ms ┃ x ort-fp32" in proc.stdout
    folder = next(tmp_path.glob("*/digits-cnn/profile-ort-int8-vs-ort-fp32+trivial-fp32+ov-int8"
                                ))
    record = load_record(folder / "results.json", kind="profile")
    assert record.against == "ort-fp32"  # the first ranks: the rest sit beside it
    assert record.references == ["ort-fp32", "trivial-fp32", "ov-int8"]
    assert list(record.others) == ["ov-int8"] and list(record.unsupported) == ["trivial-fp32"]
    rows = {row["layer"]: row["suts"] for row in record.side_by_side}
    assert set(rows) >= {"node_conv2d", "node_conv2d_1", "node_linear", "node_linear_1"}
    for name in ("node_conv2d", "node_conv2d_1"):  # each conv in every profiled SUT
        assert set(rows[name]) == {"ort-int8", "ort-fp32", "ov-int8"}
        assert all(side and side["total_ms"] > 0 for side in rows[name].values())
        assert rows[name]["ov-int8"]["precision"] == "int8"


@pytest.mark.alone  # ranks layer times: another test beside it could reorder them
def test_a_planted_slow_layer_is_ranked_first_against_the_original_model(
        tmp_path: Path) -> None:
    original = Path(shutil.copy(original_onnx(), tmp_path / "original.onnx"))
    planted = plant_slow_conv(original, tmp_path / "planted.onnx")
    proc = run_cli("profile", "--sut", "ort-fp32", "--model", MODEL, "--model-path",
                   str(planted), "--against", "ort-fp32", "--against-model-path",
                   str(original), "--batch-size", "64", "--iterations", "9", "--warmup", "2",
                   "--output", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next((tmp_path / "out").glob("*/digits-cnn/profile-ort-fp32-vs-ort-fp32@original"))
    record = load_record(folder / "results.json", kind="profile")
    assert record.against == "ort-fp32@original" and record.against_model_path == str(original)
    assert record.test["notes"]["model_file"] == str(planted)
    assert record.reference["notes"]["model_file"] == str(original)
    first = record.slower[0]
    assert first["onnx_layer"] == SLOWED and first["matched_by"] == "onnx layer"
    assert first["ratio"] > 1.5 and first["ms_lost"] > 0


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    out = ("--output", str(tmp_path))
    one_line_error(run_cli("profile", "--sut", "ort-fp32", *QUICK, *out), "against itself",
                   "--against-model-path")
    one_line_error(run_cli("profile", "--sut", "ort-int8", "--model", "digits-cnn",
                           "--iterations", "1", *out), "--iterations must be at least 3")
    one_line_error(run_cli("profile", "--sut", "nope", *QUICK, *out), "nope")
    with pytest.raises(UserError, match="names a SUT twice"):
        references(ProfileConfig(model=MODEL, sut="ort-int8", against="ort-fp32, ort-fp32"))
    assert references(ProfileConfig(model=MODEL, sut="ort-fp32", against="ort-fp32",
                                     against_model_path="x.onnx")) == ["ort-fp32"]
    with pytest.raises(UserError, match="--against-model-path .* not found"):
        run(ProfileConfig(model=MODEL, sut="ort-fp32", against="ort-fp32",
                          against_model_path=str(tmp_path / "missing.onnx")))


# ----------------------------------------------------------------------- a text encoder

#: the tiny encoder's matrix products: per layer Q, K, V, the attention output and the two
#: feed-forward projections; and attention's two (Q·K^T, scores·V)
PROJECTIONS, ATTENTION = 6 * 2, 2 * 2


def test_a_text_encoder_s_time_goes_by_role_and_int8dyn_runs_integer_kernels(
        tiny_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from quantmark import cli
    from quantmark.sut.onnxruntime.kernels import INTEGER_KERNELS

    code = cli.main(["profile", "--sut", "ort-int8dyn", "--against", "ort-fp32", "--model-path",
                     str(tiny_encoder), "--seq-len", "32", "--iterations", "5", "--warmup", "1",
                     "--output", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    folder = next(tmp_path.glob("*-ort-int8dyn/tiny/profile-ort-int8dyn-vs-ort-fp32"))
    record = load_record(folder / "results.json", kind="profile")
    test, reference = record.test["roles"], record.reference["roles"]
    for roles in (test, reference):  # each a row of its own, with real time
        assert all(roles[role]["ms"] > 0 for role in ("attention", "linear", "softmax",
                                                     "layernorm"))
        assert roles["attention"]["nodes"] == ATTENTION
        assert sum(roles["linear"]["kernels"].values()) == PROJECTIONS
    assert test["quantize"]["ms"] > 0 and "quantize" not in reference
    assert {kernel.split()[0] for kernel in test["linear"]["kernels"]} <= INTEGER_KERNELS
    assert all(kernel.endswith("int8") for kernel in test["linear"]["kernels"])
    assert set(reference["linear"]["kernels"]) <= {"MatMul fp32", "FusedMatMul fp32",
                                                   "Gemm fp32"}
    assert record.test["roles_from"] == "the graph it ran"
    assert record.task["name"] == "text" and record.layers  # every node paired in layers.csv
    assert "where the time goes, by role" in out and "MatMul/Linear" in out
    assert "DynamicQuantizeMatMul int8" in out or "MatMulIntegerToFloat int8" in out
    assert (folder / "profile.png").is_file()


@pytest.mark.parametrize("sut, against", [("ov-int8", "ov-fp32"), ("ort-int8dyn", "torch-fp32"),
                                          ("tflite-int8", "tflite-fp32")])
def test_a_framework_without_text_support_refuses_a_text_encoder_in_one_line(
        sut: str, against: str, tiny_encoder: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from quantmark import cli
    from quantmark.sut.registry import availability, get_sut

    if not all(availability(get_sut(name))[0] for name in (sut, against)):
        pytest.skip(f"{sut} or {against} cannot run here")
    code = cli.main(["profile", "--sut", sut, "--against", against, "--model-path",
                     str(tiny_encoder), "--output", str(tmp_path)])
    err = capsys.readouterr().err
    framework = against if sut.startswith("ort") else sut
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: profile: not yet for text models on ") and \
        f"({framework}); use an ort-* SUT" in err
