"""TensorFlow (CPU): ``tf-fp32``, ``tf-xla`` and ``tf-amp`` on the cached SavedModel.

Every SUT wraps the SavedModel's ``serving_default`` signature in one ``tf.function`` with a
fixed ``[None, H, W, C]`` input signature (the spec's size, channels and input type), so every
batch size reuses one traced graph; ``tf-xla`` compiles that function with
``jit_compile=True`` (XLA compiles once per batch shape).

``tf-amp`` cannot use the Keras mixed-precision policy: a loaded graph has no layers left to
apply it to. It uses grappler's auto mixed precision rewrite instead (bf16 through oneDNN on the
CPU, fp16 on a GPU), which rewrites the graph when the function is instantiated.

Proof of what executed comes from the graph TensorFlow actually ran: ``load`` calls the fresh
function once with the eager context's run metadata on, and counts the compute nodes
(convolutions, matmuls, oneDNN's fused kernels) of the instantiated partition graphs by dtype
(``executed_graph``).
A ``tf-amp`` whose executed graph has no half-precision compute node fails at load instead of
reporting FP32 as mixed; a ``tf-fp32`` that runs any half-precision node fails too, as does
an FP32 SUT under ``TF_SET_ONEDNN_FPMATH_MODE`` (oneDNN's implicit down-conversion). For
``tf-xla`` no TensorFlow graph runs at all; its proof is the HLO XLA compiled.

On a GPU (TensorFlow sees one) every SUT runs there: ``tf-amp`` with grappler's FP16 rewrite,
the graph-level counterpart of Keras' ``mixed_float16`` policy, which a loaded graph cannot take;
``tf-xla`` compiles for the GPU. TF32 is switched off (FP32 nodes stay FP32), GPU memory grows on
demand instead of being taken whole at start (so the tracker's GPU memory means something), and
the evidence names the device of every compute node (and of the XLA function's output). A GPU
that is visible while compute nodes ran on the CPU is a SutError: no silent CPU fallback.

A detector (``spec.task == "detection"``) returns its output in the ONNX model's layout, turned
back where onnx2tf left it transposed (the evidence's ``output`` says which); a first inference
that fails (XLA cannot compile onnx2tf's GatherElements of an nms head) is one line. A text
encoder runs in ``text``'s subclass (token inputs by name, one sample per call).

Process-global state: grappler's rewrite options and the intra-op thread count belong to the
TensorFlow runtime, not to one function. Each SUT sets the rewrite options it needs at load and
never resets them: a worker thread builds its function-call config from the global options on
its first call, so resetting after load would silently run FP32 in the workers. quantmark runs
one SUT per process, so this is safe there; tests run ``tf-amp`` in a subprocess.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError
from quantmark.sut.interface import Backend
from quantmark.sut.registry import module_sut
from quantmark.sut.tensorflow.executed_graph import (
    HALF_DTYPES,
    HLO_HALF,
    XLA_LAUNCH_OPS,
    count_executed_nodes,
    count_hlo,
    cpu_fallback,
    executed_precision,
)

#: the module whose ``create`` builds these SUTs (the registry's ``.backend:create``)
FACTORY_MODULE = "quantmark.sut.tensorflow.backend"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before tensorflow is first imported

#: grappler's mixed precision rewrite per device type
AMP_OPTIONS = {"CPU": "auto_mixed_precision_onednn_bfloat16", "GPU": "auto_mixed_precision"}
ENV_KNOBS = ("TF_ENABLE_ONEDNN_OPTS", "TF_SET_ONEDNN_FPMATH_MODE", "TF_XLA_FLAGS")
MODEL_PATH_FORMATS = ("a torch state_dict (.pt/.pth/.bin)", "an .onnx file",
                      "a TensorFlow SavedModel directory")


def _signature_io(signature: Any, meta: dict[str, Any]) -> tuple[str, str]:
    """(input name, output name) of the serving signature: from the artifact meta, else the
    single input and the single [N, classes] output (a detector's: its rank-3 output)."""
    inputs = signature.structured_input_signature[1]
    outputs = signature.structured_outputs
    input_name = meta.get("input_name") or next(iter(inputs))
    output_name = meta.get("output_name")
    if output_name is None:
        classes, detector = meta.get("num_classes"), meta.get("task") == "detection"
        output_name = next((n for n, spec in outputs.items() if len(spec.shape) == 2 + detector
                            and (detector or classes is None or spec.shape[1] == classes)),
                           next(iter(outputs)))
    return input_name, output_name


class TensorFlowBackend(Backend):
    """One ``tf.function`` over the SavedModel's serving signature, shared by all workers."""

    def __init__(self, name: str, artifact: Any, spec: Any, threads: int) -> None:
        self.name = name
        self.precision = module_sut(name, FACTORY_MODULE).precision_key
        self.artifact = artifact
        self.model_dir = str(Path(artifact.path).parent)
        self.layout = (artifact.meta or {}).get("layout", "NHWC")
        self.label_offset = int((artifact.meta or {}).get("label_offset", 0))
        #: the input the spec feeds: height, width, channels and type (raw pixels: uint8)
        self.input_size = (spec.input_size, spec.input_width)
        self.channels = spec.channels
        self.input_dtype = spec.input_dtype
        self.threads = threads
        #: a detector's spec: its output is turned back to the ONNX layout where onnx2tf left
        #: it transposed (``_transposed``, recorded in the evidence)
        self.detector = spec if getattr(spec, "task", "") == "detection" else None
        self._transposed = False
        self.jit = name == "tf-xla"
        self._fn: Any = None
        self._tf: Any = None
        self._loaded: Any = None
        self._evidence: dict[str, Any] = {}
        self._executed = ""
        self._grappler: dict[str, Any] = {}
        self._grappler_before: dict[str, bool] | None = None  # restored on close
        self._device = "CPU"
        self._first_call_s: dict[int, float] = {}  # XLA: compile + one run, per batch size

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        tf = self._tf
        return {"api": "tf.function over the SavedModel's serving_default signature",
                "jit_compile": self.jit, "device": self._device,
                "threads": self.threads or "default",
                "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
                "grappler": self._grappler}

    def _input_shape(self, batch: int | None) -> list[int | None]:
        (height, width), channels = self.input_size, self.channels
        return ([batch, height, width, channels] if self.layout == "NHWC"
                else [batch, channels, height, width])

    def _set_grappler_options(self, device: str) -> None:
        """Mixed precision on for tf-amp (the device's flavour), explicitly off otherwise."""
        tf = self._tf
        self._grappler_before = {option: bool(tf.config.optimizer.get_experimental_options()
                                              .get(option, False))
                                 for option in AMP_OPTIONS.values()}
        wanted = {option: False for option in AMP_OPTIONS.values()}
        if self.precision == "mixed":
            wanted[AMP_OPTIONS[device]] = True
        tf.config.optimizer.set_experimental_options(wanted)
        self._grappler = tf.config.optimizer.get_experimental_options()

    def load(self) -> None:
        import tensorflow as tf
        from tensorflow.python.eager import context

        self._tf = tf
        fpmath = os.environ.get("TF_SET_ONEDNN_FPMATH_MODE", "STRICT").upper()
        if self.precision == "fp32" and fpmath not in ("", "STRICT"):
            raise SutError(f"{self.name}: TF_SET_ONEDNN_FPMATH_MODE={fpmath} lets oneDNN compute "
                           "FP32 nodes in lower precision; unset it for an FP32 SUT")
        device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
        self._device = device
        if device == "GPU":  # FP32 nodes stay FP32 (Ampere and newer default to TF32)
            tf.config.experimental.enable_tensor_float_32_execution(False)
        self._set_grappler_options(device)
        try:
            loaded = tf.saved_model.load(self.model_dir)
            signature = loaded.signatures["serving_default"]
        except (KeyError, ValueError, OSError) as exc:
            raise SutError(f"{self.name}: cannot load the SavedModel {self.model_dir}: {exc}"
                           ) from exc
        self._fn, probe = self._serving(signature)
        self._loaded = loaded  # the signature's variables live as long as the backend
        context.enable_run_metadata()
        context.export_run_metadata()  # drops graphs stored before: only the probe's count
        try:
            started = time.perf_counter()
            output = self._fn(*probe)
            output.numpy()
            first_s = time.perf_counter() - started
            metadata = context.export_run_metadata()
        except Exception as exc:  # XLA or grappler failures surface here
            raise self._first_call_failed(exc) from exc
        finally:
            context.disable_run_metadata()
        graphs = [g for f in metadata.function_graphs for g in f.partition_graphs]
        graphs = graphs or list(metadata.partition_graphs)
        executed = count_executed_nodes(graphs)
        if self.jit:
            self._first_call_s[1] = round(first_s, 3)
            self._xla_evidence(probe, graphs, executed)
        else:
            if not graphs:
                raise SutError(f"{self.name}: TensorFlow reported no executed graph for the "
                               "first call; cannot prove what ran")
            self._executed = executed_precision(self.name, executed["compute"], HALF_DTYPES,
                                                device)
            self._evidence = {"executed_graph": "partition graphs of the instantiated serving "
                              "function (eager run metadata)", **executed}
        self._evidence["device"] = device
        self._evidence["output_device"] = output.device
        self._evidence.update(self._detector_output(output.shape.as_list()))
        self._check_placement(device, executed, output.device)

    def _serving(self, signature: Any) -> tuple[Any, tuple[Any, ...]]:
        """The tf.function the SUT calls (one traced graph for every batch size) and the
        arguments of the load's probe call."""
        tf = self._tf
        input_name, output_name = _signature_io(signature, self.artifact.meta or {})

        def serve(images: Any) -> Any:
            return signature(**{input_name: images})[output_name]

        dtype = tf.as_dtype(self.input_dtype)
        fn = tf.function(serve, jit_compile=self.jit, input_signature=[
            tf.TensorSpec(self._input_shape(None), dtype, name="images")])
        return fn, (tf.zeros(self._input_shape(1), dtype),)

    def _first_call_failed(self, exc: Exception) -> SutError:
        """A detector's in one line: XLA cannot compile some of onnx2tf's head ops."""
        if self.detector is None:
            return SutError(f"{self.name}: first inference failed: {exc}")
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return SutError(f"{self.name}: the detector's first inference failed ({cause})"
                        f"{'; run it as tf-fp32' if self.jit else ''}")

    def _detector_output(self, dims: list[int | None]) -> dict[str, Any]:
        """A detector's output layout for the evidence ({} for a classifier); SutError (one
        line) for a head the spec does not have."""
        from quantmark.models.saved_model import detector_layout

        if self.detector is None:
            return {}
        transposed = detector_layout([None, *dims[1:]], self.detector)
        if transposed is None:
            raise SutError(f"{self.name}: {self.model_dir} outputs {dims}, not the "
                           f"{self.detector.head} head of {self.detector.num_classes} classes")
        self._transposed = transposed
        return {"output": {"task": "detection", "head": self.detector.head, "shape": dims,
                           "transposed_back": transposed}}

    def _check_placement(self, device: str, executed: dict[str, Any], output_device: str
                         ) -> None:
        """With a GPU visible, the compute must have run on it (no silent CPU fallback)."""
        if device != "GPU":
            return
        on_cpu = cpu_fallback(executed["compute_devices"])
        if on_cpu:
            raise SutError(f"{self.name}: {on_cpu} compute node(s) ran on the CPU although "
                           f"TensorFlow sees a GPU (compute nodes by device: "
                           f"{executed['compute_devices']}); refusing to measure a CPU fallback")
        if self.jit and ":GPU:" not in output_device.upper():
            raise SutError(f"{self.name}: the XLA function ran on {output_device}, not the GPU "
                           "TensorFlow sees; refusing to measure a CPU fallback")

    def _xla_evidence(self, probe: tuple[Any, ...], graphs: list[Any],
                      executed: dict[str, Any]) -> None:
        """XLA's own compiled HLO: jit_compile=True has no fallback, so a function XLA cannot
        compile fails instead of running in the graph executor. Depending on what the process
        ran before, TensorFlow calls the compiled function directly (no executed partition) or
        through a graph whose only work is an XLA launch; either way no convolution or matmul
        may run outside XLA."""
        ops = sorted({node.op for graph in graphs for node in graph.node})
        launches = [op for op in ops if op in XLA_LAUNCH_OPS]
        if any(executed["compute"].values()) or (ops and not launches):
            raise SutError(f"{self.name}: TensorFlow's graph executor ran {ops} (compute nodes "
                           f"{executed['compute']}); the function was not XLA-compiled")
        started = time.perf_counter()
        hlo = self._fn.experimental_get_compiler_ir(*probe)(stage="optimized_hlo")
        counts = count_hlo(hlo)
        self._executed = executed_precision(self.name, counts["compute"], HLO_HALF,
                                            self._device)
        self._evidence = {"executed_graph": "XLA optimized HLO for batch 1 "
                          "(experimental_get_compiler_ir)", "xla_hlo": counts,
                          "tf_graph_executor_compute_nodes": 0,
                          "tf_graph_executor_ops": ops,
                          "ir_compile_s": round(time.perf_counter() - started, 3)}

    def predict(self, batch: np.ndarray) -> np.ndarray:
        images = self._tf.convert_to_tensor(batch, dtype=self.input_dtype)
        if self.jit and len(batch) not in self._first_call_s:  # XLA compiles per batch shape
            started = time.perf_counter()
            scores = self._fn(images).numpy()
            self._first_call_s.setdefault(len(batch), round(time.perf_counter() - started, 3))
        else:
            scores = self._fn(images).numpy()
        return np.ascontiguousarray(scores.transpose(0, 2, 1)) if self._transposed else scores

    def describe(self) -> dict[str, Any]:
        tf = self._tf
        current = tf.config.optimizer.get_experimental_options()
        if any(current.get(k) != self._grappler.get(k) for k in AMP_OPTIONS.values()):
            raise SutError(f"{self.name}: grappler's mixed precision options changed after load "
                           f"({self._grappler} -> {current}); what the workers ran is unknown")
        xla: dict[str, Any] = {"jit_compile": self.jit}
        if self.jit:
            xla["first_call_s"] = {str(k): v for k, v in sorted(self._first_call_s.items())}
            xla["first_call_note"] = "XLA compile + one run, per batch size"
        return {
            "framework": "tensorflow",
            "framework_version": tf.__version__,
            "device": self._device.lower(),
            "requested_precision": self.precision,
            "executed_precision": self._executed,
            "threads": self.threads or os.cpu_count(),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "model_dir": self.model_dir,
            # GPU only: TF32 is an NVIDIA tensor-core mode (switched off at load)
            "tensor_float_32": (tf.config.experimental.tensor_float_32_execution_enabled()
                                if self._device == "GPU" else None),
            "evidence": {**self._evidence, "xla": xla, "grappler_options": self._grappler,
                         "env": {k: os.environ[k] for k in ENV_KNOBS if k in os.environ}},
        }

    def close(self) -> None:
        self._fn = None
        self._loaded = None
        if self._grappler_before is not None:  # the process's options: leave them as found
            self._tf.config.optimizer.set_experimental_options(self._grappler_before)
            self._grappler_before = None
