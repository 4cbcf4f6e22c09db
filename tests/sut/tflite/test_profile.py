"""TFLite's per-op profile (run.py profile) on the digits CNN: the benchmark tool's op-profiling
table read into rows whose precision comes from the SUT's own .tflite, a one-line error where
no tool here can profile ops (ai-edge-litert's Python litert-benchmark cannot), and then each op
timed in isolation through the interpreter, its one-op model proven to be the same op."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.profiling import CATEGORIES, Profile  # noqa: E402
from quantmark.sut.tflite import op_isolation  # noqa: E402
from quantmark.sut.tflite import profile as tfl_profile  # noqa: E402
from quantmark.sut.tflite.backend import TFLiteBackend, create  # noqa: E402
from quantmark.sut.tflite.inspection import open_interpreter  # noqa: E402
from tests.digits_model import DIGITS_SPEC  # noqa: E402

SUTS = ("tflite-fp32", "tflite-int8")
COMPUTE = {"CONV_2D", "FULLY_CONNECTED"}


@pytest.fixture(scope="module")
def backends(digits_weights, digits_calibration) -> dict[str, TFLiteBackend]:
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnx2tf")
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=2,
                         model_path=str(digits_weights))
    out = {name: create(name, options, DIGITS_SPEC, digits_calibration) for name in SUTS}
    for backend in out.values():
        backend.load()
    return out


@pytest.fixture(scope="module")
def samples(digits_data) -> np.ndarray:
    return np.ascontiguousarray(digits_data.eval_x[:8].transpose(0, 2, 3, 1))


def _ops(path: str) -> list[dict]:
    """The model's nodes as the file holds them (no delegate)."""
    from ai_edge_litert.interpreter import OpResolverType

    interpreter = open_interpreter(
        path, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return interpreter._get_ops_details()


def _table(ops: list[dict], ms: float = 0.25) -> str:
    """A benchmark_model report in the C++ tool's layout, one row per op of the real model
    (the times are made up: this checks the reading, not the tool)."""
    head = ("\t             [node type]\t          [start]\t  [first]\t [avg ms]\t     [%]\t"
            "  [cdf%]\t  [mem KB]\t[times called]\t[Name]")
    rows = [f"\t{op['op_name']:>24}\t{0.01 * i:17.3f}\t{ms:9.3f}\t{ms:9.3f}\t  10.000%\t"
            f"  50.000%\t     0.000\t        1\t[tensor_{i}]:{op['index']}"
            for i, op in enumerate(ops)]
    return "\n".join([
        "INFO: Inference timings in us: Init: 2100, First inference: 900, Warmup (avg): "
        "450.5, Inference (avg): 1234.5",
        "Operator-wise Profiling Info for Regular Benchmark Runs:",
        "============================== Run Order ==============================",
        head, *rows, "",
        "============================== Top by Computation Time ==============================",
        head, *rows[:1], ""])


@pytest.mark.parametrize("name", SUTS)
def test_a_table_of_the_real_model_reads_into_rows(backends, name) -> None:
    path = backends[name].model_path
    ops = _ops(path)
    text = _table(ops)
    rows = tfl_profile.parse_run_order(text)
    assert [row.index for row in rows] == [op["index"] for op in ops]  # run order, no dupes
    assert tfl_profile.parse_inference_avg_ms(text) == pytest.approx(1.2345)
    layers = tfl_profile._layers(rows, tfl_profile.op_precisions(open_interpreter(path)))
    compute = [layer for layer in layers if layer.op_type in COMPUTE]
    assert len(compute) == 4  # three convolutions and the classifier
    assert all(layer.category == "compute" and layer.median_ms == 0.25 for layer in compute)
    assert {layer.precision for layer in compute} == {"int8" if name == "tflite-int8"
                                                      else "fp32"}
    assert all(layer.category in CATEGORIES for layer in layers)
    moved = [layer for layer in layers if layer.op_type in ("TRANSPOSE", "QUANTIZE",
                                                            "DEQUANTIZE")]
    assert moved and all(layer.category == "overhead" for layer in moved)


def test_xnnpack_operator_rows_are_read_by_name() -> None:
    row = tfl_profile.ToolRow("Convolution (NHWC, QC8) IGEMM", "conv", 3, 0.5, 1)
    (layer,) = tfl_profile._layers([row], {})
    assert (layer.precision, layer.category, layer.kernel) == ("int8", "compute", "XNNPACK")
    assert tfl_profile.category("Convert (NC, F32, QD8)") == "overhead"
    assert tfl_profile.category("TfLiteXNNPackDelegate") == "compute"


def test_a_missing_section_reads_as_no_rows() -> None:
    assert tfl_profile.parse_run_order("Inference timings in us: Init: 1") == []
    assert tfl_profile.parse_inference_avg_ms("nothing") == 0.0


def test_the_command_feeds_the_real_batch(backends, samples, tmp_path) -> None:
    backend = backends["tflite-int8"]
    inputs, batch = tfl_profile._inputs(backend, samples, str(tmp_path))
    ((name, shape, file),) = inputs
    assert batch == 8 and shape == (8, 32, 32, 3)
    written = np.fromfile(file, np.int8).reshape(shape)
    np.testing.assert_array_equal(written, backend._to_input(samples))  # as predict feeds it
    command = tfl_profile.tool_command("benchmark_model", "--graph", backend.model_path, 2,
                                       15, 3, inputs)
    assert f"--graph={backend.model_path}" in command
    assert {"--num_threads=2", "--num_runs=15", "--warmup_runs=3",
            "--enable_op_profiling=true", "--input_layer_shape=8,32,32,3"} <= set(command)
    assert f"--input_layer_value_files={name.replace(':', '::')}:{file}" in command


def test_no_tool_is_one_line_naming_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SutError, match=r"^tflite: litert-benchmark not found; install "
                                       r"quantmark\[cpu\]$"):
        tfl_profile.find_tool()


def test_a_tool_without_op_profiling_is_refused_in_one_line(monkeypatch, tmp_path) -> None:
    tool = tmp_path / "litert-benchmark"
    tool.write_text("#!/bin/sh\necho 'usage: --model MODEL --num_runs N'\n")
    tool.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SutError, match="no --enable_op_profiling") as raised:
        tfl_profile.find_tool()
    assert "\n" not in str(raised.value)
    tool.write_text("#!/bin/sh\necho '--graph: model  --enable_op_profiling: bool'\n")
    assert tfl_profile.find_tool() == (str(tool), "--graph")


def test_bad_counts_are_user_errors(backends, samples) -> None:
    with pytest.raises(UserError, match="iterations must be >= 1"):
        tfl_profile.profile(backends["tflite-fp32"], samples, 0, 1)


def _tool_or_skip() -> None:
    try:
        tfl_profile.find_tool()
    except SutError as exc:
        assert "\n" not in str(exc)  # the report's one line
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", SUTS)
def test_the_tool_times_every_conv_and_the_classifier(backends, samples, name) -> None:
    _tool_or_skip()
    prof = tfl_profile.profile(backends[name], samples, iterations=15, warmup=3)
    compute = [row for row in prof.layers if row.op_type in COMPUTE or "Convolution" in
               row.op_type or "Fully Connected" in row.op_type]
    assert len(compute) >= 4 and all(row.median_ms > 0 for row in compute)
    if name == "tflite-int8":
        assert {row.precision for row in compute} == {"int8"}
        assert all(row.category == "overhead" for row in prof.layers
                   if row.op_type in ("QUANTIZE", "DEQUANTIZE"))
    assert prof.end_to_end_ms > 0 and 0 < prof.layer_sum_ms <= 3 * prof.end_to_end_ms
    assert "averages" in prof.notes["statistic"]


# ------------------------------------------------------- no tool: each op timed in isolation
ISOLATED = "each op timed in isolation (one-op models), not in situ"


def _no_tool() -> tuple[str, str]:
    raise SutError("tflite: no tool with op profiling here")


@pytest.fixture(scope="module")
def isolated(backends, samples) -> dict[str, Profile]:
    """Both SUTs profiled through the interpreter (the tool made missing, wherever it is)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tfl_profile, "find_tool", _no_tool)
        return {name: tfl_profile.profile(backends[name], samples, iterations=5, warmup=1)
                for name in SUTS}


def _output_names(path: str) -> list[str]:
    interpreter = open_interpreter(path)
    tensors = {int(t["index"]): t["name"] for t in interpreter.get_tensor_details()}
    return [tensors[int(op["outputs"][0])] for op in _ops(path)]


@pytest.mark.parametrize("name", SUTS)
def test_without_a_tool_every_op_is_timed_in_isolation(backends, isolated, name) -> None:
    prof, path = isolated[name], backends[name].model_path
    ops = _ops(path)
    assert [row.op_type for row in prof.layers] == [op["op_name"] for op in ops]
    assert [row.name for row in prof.layers] == _output_names(path)  # one row per op, in order
    # net of an empty invoke: a reshape may come to nothing; a convolution never does
    assert all(row.median_ms >= 0 and row.calls == 1 for row in prof.layers)
    assert all(row.kernel in ("XNNPACK", "TFLite builtin") for row in prof.layers)
    compute = [row for row in prof.layers if row.op_type in COMPUTE]
    assert len(compute) == 4 and all(row.category == "compute" for row in compute)
    assert all(row.median_ms > 0 for row in compute)
    assert {row.precision for row in compute} == {"int8" if name == "tflite-int8" else "fp32"}
    moved = [row for row in prof.layers if row.op_type in ("TRANSPOSE", "QUANTIZE",
                                                           "DEQUANTIZE")]
    assert moved and all(row.category == "overhead" for row in moved)
    assert ISOLATED in prof.method and prof.end_to_end_ms > 0
    assert prof.batch_size == 8 and prof.iterations == 5 and prof.framework == "tflite"
    assert prof.sut == name
    assert prof.notes["path"].startswith("tflite: no tool with op profiling here: each op")
    assert float(prof.notes["empty_invoke_ms"]) > 0
    raw = float(prof.notes["invoke_overhead"].split("subtraction was ")[1].split(" ms")[0])
    assert raw > prof.layer_sum_ms  # the empty invoke came off every op


def test_an_op_is_timed_net_of_the_empty_invoke_of_its_round() -> None:
    assert tfl_profile.net([0.005, 0.004, 0.001], [0.001, 0.002, 0.003]) == pytest.approx(
        [0.004, 0.002, 0.0])


@pytest.mark.parametrize("name", SUTS)
def test_a_one_op_model_computes_what_the_op_computes_in_the_model(backends, samples,
                                                                   name) -> None:
    """Each one-op model, fed the operands the whole model gave its op, gives the op's output
    in the whole model: the same op, weights and quantization."""
    path = backends[name].model_path
    ops = op_isolation.one_op_models(path)
    assert [op.index for op in ops] == [op["index"] for op in _ops(path)]
    x = backends[name]._to_input(samples)
    wanted = {t for op in ops for t in (*op.inputs, *op.outputs)}
    values = op_isolation.capture_tensors(path, x, wanted)
    for op in ops:
        (out,) = op_isolation.run_one_op(op, values, threads=2)
        expected = values[op.outputs[0]]
        assert out.dtype == expected.dtype and out.shape == expected.shape
        if out.dtype == np.int8:  # one step of rounding at most
            assert np.abs(out.astype(int) - expected.astype(int)).max() <= 1, op.index
        else:
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    conv = next(op for op in ops if _ops(path)[op.index]["op_name"] == "CONV_2D")
    other = dict(values)
    other[conv.inputs[0]] = np.zeros_like(values[conv.inputs[0]])  # the check can fail
    (changed,) = op_isolation.run_one_op(conv, other, threads=2)
    assert not np.array_equal(changed, values[conv.outputs[0]])


def test_the_empty_model_adds_two_numbers() -> None:
    interpreter = op_isolation.empty_interpreter(threads=1)
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    assert interpreter.get_tensor(int(out["index"])).tolist() == [2.0]


def test_a_tool_that_profiles_is_used_first(backends, samples, tmp_path, monkeypatch) -> None:
    """Where a tool with op profiling is found, its table gives the rows, not isolation."""
    path = backends["tflite-int8"].model_path
    report = tmp_path / "report.txt"
    report.write_text(_table(_ops(path)))
    tool = tmp_path / "benchmark_model"
    tool.write_text(f"#!/bin/sh\ncat {report}\n")
    tool.chmod(0o755)
    monkeypatch.setattr(tfl_profile, "find_tool", lambda: (str(tool), "--graph"))
    prof = tfl_profile.profile(backends["tflite-int8"], samples, iterations=3, warmup=1)
    assert prof.method == tfl_profile.PROFILER and prof.end_to_end_ms == pytest.approx(1.2345)
    assert prof.notes["path"] == "the benchmark tool's op profiling (benchmark_model)"
    assert all(row.median_ms == 0.25 for row in prof.layers)
