"""``--sut-option keep_float=LAYER[,LAYER...]``: run.py runs a mixed-precision point, its INT8
model re-quantized by its framework's own exclusion (``rebuild``, as ``run.py diagnose
--recover`` builds it), refused in one line for a SUT that cannot, and (slow) real runs of
digits-cnn on ort-int8 and ov-int8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.sut.registry import (
    SUTS,
    check_options,
    keep_float_layers,
    takes_keep_float,
)

MODEL = "digits-cnn"


def test_the_static_int8_suts_that_a_framework_rebuilds_take_it() -> None:
    takers = {name for name, info in SUTS.items() if takes_keep_float(info)}
    assert {"ort-int8", "ov-int8", "tflite-int8", "torch-int8", "trt-int8"} <= takers
    # FP32, dynamic INT8, and ort-trt-int8 (built by ORT's GPU module, which rebuild refuses)
    assert not takers & {"ort-fp32", "ov-fp32", "ort-int8dyn", "torch-int8dyn",
                         "ort-trt-int8", "tf-fp32"}


def test_check_options_takes_layers_and_refuses_other_suts_in_one_line() -> None:
    check_options(SUTS["ort-int8"], {"keep_float": "node_Conv_1,node_Conv_2"})
    check_options(SUTS["ov-int8"], {"keep_float": "conv", "ov_api": "async"})
    with pytest.raises(UserError) as refused:
        check_options(SUTS["ort-fp32"], {"keep_float": "node_Conv_1"})
    message = str(refused.value)
    assert "\n" not in message and "ort-fp32 cannot keep layers in float" in message
    assert "ort-int8" in message and "ov-int8" in message
    with pytest.raises(UserError, match="names no layer"):
        check_options(SUTS["ort-int8"], {"keep_float": " , "})


def test_the_layers_are_read_in_order_each_once() -> None:
    assert keep_float_layers({}) == ()
    assert keep_float_layers({"keep_float": " b, a,b ,"}) == ("b", "a")


def test_run_py_refuses_it_for_an_fp32_sut_in_one_line(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    proc = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model", MODEL,
                   "--sut-option", "keep_float=node_Conv_1", "--output", str(tmp_path),
                   timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "ort-fp32 cannot keep layers in float" in proc.stderr


def _int8_layer(sut: str) -> str:
    """A layer the diagnosis captures running INT8 in ``sut``'s own model (its first)."""
    from quantmark.diagnosis import steps
    from quantmark.models.workload import resolve_spec

    config = steps.DiagnoseConfig(model=MODEL, sut=sut, samples=2)
    spec = resolve_spec(config)
    data, calibration = steps.open_data(config, spec)
    backend, module = steps.build(config, sut, spec, calibration)
    try:
        capture = module.capture(backend, data.batch(backend.layout, 0, 2))
    finally:
        backend.close()
    return next(layer.name for layer in capture.layers
                if layer.precision.startswith("int") and layer.excludable)


def _run(tmp_path: Path, sut: str, name: str, **options: str) -> dict[str, Any]:
    """One quick Offline run of digits-cnn as run.py makes it (validated, then launched)."""
    from quantmark.run.checks import validate
    from quantmark.run.launch import launch

    config = RunConfig(scenario="Offline", sut=sut, model=MODEL, batch_size=8,
                       output=str(tmp_path / name), quick_duration_ms=1000,
                       sut_options=dict(options))
    validate(config)
    result = launch(config, timeout_s=600)
    assert result.status == "ok", result.message
    return json.loads((Path(result.run_dir) / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("sut", ["ort-int8", "ov-int8"])
def test_a_run_keeping_one_layer_in_float_is_valid_and_says_so(tmp_path: Path,
                                                              sut: str) -> None:
    layer = _int8_layer(sut)
    plain = _run(tmp_path, sut, "plain")
    mixed = _run(tmp_path, sut, "mixed", keep_float=layer)
    for record in (plain, mixed):
        assert record["summary"]["validity"] == "VALID", record["summary"]
    # the record names the layer; the artifact is the framework's own exclusion, its own file
    assert mixed["config"]["sut_options"] == {"keep_float": layer}
    assert mixed["model"]["key"] != plain["model"]["key"]
    assert mixed["model"]["artifact"] != plain["model"]["artifact"]
    # still proven INT8 at load (the run would have refused otherwise), one layer less of it
    assert "int8" in mixed["sut"]["executed_precision"].lower()
    if sut == "ort-int8":
        assert mixed["model"]["meta"]["changes"] == {"exclude": [layer]}
        nodes = [record["sut"]["compute_nodes_by_precision"] for record in (plain, mixed)]
        assert nodes[1].get("fp32", 0) > nodes[0].get("fp32", 0), nodes


@pytest.mark.slow
@pytest.mark.parametrize("sut", ["ov-int8", "ort-int8"])
def test_an_unknown_layer_is_one_line(tmp_path: Path, sut: str) -> None:
    from quantmark.run.launch import launch

    config = RunConfig(scenario="Offline", sut=sut, model=MODEL, batch_size=8,
                       output=str(tmp_path), quick_duration_ms=1000,
                       sut_options={"keep_float": "no_such_layer"})
    result = launch(config, timeout_s=600)
    assert result.status == "user_error", result
    assert "no_such_layer" in result.message and "\n" not in result.message
