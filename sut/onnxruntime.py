"""ONNX Runtime (CPU execution provider): ``ort-fp32`` and ``ort-int8``.

``ort-int8`` runs a statically quantized QDQ model (per-channel weights, calibrated on the
shared calibration set). Proof of what executed comes from the graph ORT actually runs: the
session writes its optimized model, and we count the integer kernels in it (QLinearConv,
ConvInteger, QLinearMatMul, ...). An INT8 SUT whose optimized graph has no integer kernel fails
at load instead of silently measuring FP32.
"""

from __future__ import annotations

import collections
import os
import tempfile
from typing import Any

import numpy as np

from quantmark.errors import SutError, UserError
from sut.interface import Backend, SutOptions

INTEGER_KERNELS = (
    "QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger", "QGemm",
    "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearSigmoid",
)


def _graph_op_counts(path: str) -> dict[str, int]:
    import onnx

    model = onnx.load(path, load_external_data=False)
    counts: collections.Counter[str] = collections.Counter()
    for node in model.graph.node:
        counts[node.op_type] += 1
    return dict(sorted(counts.items()))


class OnnxRuntimeBackend(Backend):
    """One ORT InferenceSession on the CPU execution provider."""

    def __init__(self, model_path: str, precision: str, threads: int, artifact: Any,
                 spin: bool = True) -> None:
        self.model_path = model_path
        self.precision = precision
        self.threads = threads
        self.spin = spin
        self.artifact = artifact
        self.layout = (artifact.meta or {}).get("layout", "NCHW")
        self.label_offset = int((artifact.meta or {}).get("label_offset", 0))
        self._session: Any = None
        self._input_name = ""
        self._executed: dict[str, Any] = {}

    def load(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # the optimized-model dump warns on every load
        if not self.spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self.threads:
            options.intra_op_num_threads = self.threads
        with tempfile.TemporaryDirectory(prefix="quantmark-ort-") as tmp:
            optimized = os.path.join(tmp, "optimized.onnx")
            options.optimized_model_filepath = optimized
            try:
                self._session = ort.InferenceSession(
                    self.model_path, sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # ORT raises its own exception types
                raise SutError(f"onnxruntime could not load {self.model_path}: {exc}") from exc
            executed_ops = _graph_op_counts(optimized) if os.path.exists(optimized) else {}
        self._input_name = self._session.get_inputs()[0].name
        integer = {op: n for op, n in executed_ops.items() if op in INTEGER_KERNELS}
        source_ops = _graph_op_counts(self.model_path)
        self._executed = {
            "providers": self._session.get_providers(),
            "source_qdq": {
                "QuantizeLinear": source_ops.get("QuantizeLinear", 0),
                "DequantizeLinear": source_ops.get("DequantizeLinear", 0),
            },
            "executed_integer_kernels": integer,
            "executed_op_types": executed_ops,
            "executed_precision": "int8" if integer else "fp32",
        }
        if self.precision == "int8" and not integer:
            raise SutError(
                "ort-int8: onnxruntime's optimized graph has no integer kernels "
                f"(ops: {sorted(executed_ops)}); refusing to measure FP32 as INT8"
            )
        if self.precision == "fp32" and integer:
            raise SutError(f"ort-fp32: model runs integer kernels {integer}; pass an FP32 model")

    def predict(self, batch: np.ndarray) -> np.ndarray:
        return self._session.run(None, {self._input_name: batch})[0]

    def describe(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {
            "framework": "onnxruntime",
            "framework_version": ort.__version__,
            "requested_precision": self.precision,
            "threads": self.threads or os.cpu_count(),
            "intra_op_spinning": self.spin,
            "model_file": self.model_path,
            **self._executed,
        }

    def close(self) -> None:
        self._session = None


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> OnnxRuntimeBackend:
    """Prepare (export, and for INT8 quantize) the ONNX artifact, then build the backend.

    ``calibration`` is only touched for INT8: a provider with ``arrays(layout)`` and ``hash()``.
    """
    from models.onnx_export import export_onnx, load_user_onnx

    precision = {"ort-fp32": "fp32", "ort-int8": "int8"}[name]
    if options.model_path:
        if not options.model_path.endswith(".onnx"):
            raise UserError(
                f"--model-path {options.model_path}: the ONNX Runtime SUTs take an .onnx file "
                f"(model {options.model})"
            )
        fp32 = load_user_onnx(options.model_path, spec)
    else:
        fp32 = export_onnx(spec)
    artifact = fp32
    if precision == "int8":
        from models.ort_quantize import quantize_static_int8

        layout = (fp32.meta or {}).get("layout", "NCHW")
        artifact = quantize_static_int8(fp32, calibration.arrays(layout), calibration.hash())
    # Server queries arrive on LoadGen's schedule and pass through a worker thread: ORT's
    # spinning intra-op threads would starve those threads of the CPU between predictions.
    spin = options.scenario != "Server"
    return OnnxRuntimeBackend(str(artifact.path), precision, options.threads, artifact, spin)
