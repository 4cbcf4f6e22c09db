"""OpenVINO (CPU plugin): ``ov-fp32``, ``ov-bf16``, ``ov-fp16`` and ``ov-int8``.

All four compile an IR converted from the canonical FP32 ONNX (``sut.openvino.convert``); the
float SUTs differ only in ``INFERENCE_PRECISION_HINT``, ``ov-int8`` runs an NNCF-quantized IR
with the hint at f32 so its non-quantized parts stay f32. Proof of what executed comes from
the compiled model's runtime graph: every node carries the CPU plugin's ``layerType`` and
``runtimePrecision``, and we count the precisions of the compute layers. A SUT whose compute
layers do not run its precision fails at load (an INT8 or BF16 label on FP32 work would be a
lie), with one documented exception: the CPU plugin runs an f16 hint as bf16 on CPUs without
FP16 arithmetic, and ``ov-fp16`` then runs and says so (``executed_precision`` "bf16" and a
``precision_note``).

A text encoder (``models.text_graph``) runs the same way from its ONNX file, read by OpenVINO's
ONNX frontend with its token inputs fed by name (``sut.openvino.text``: shapes, NNCF's
transformer INT8 recipe, and the record's text evidence).
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.models.detector_graph import is_detector
from quantmark.models.text_graph import is_text
from quantmark.sut.info import SutInfo
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.openvino.runtime_graph import executed_precision, rt_text, runtime_evidence
from quantmark.sut.openvino.suts import OV_API_OPTION, OV_APIS, OV_STREAMS, OV_STREAMS_OPTION
from quantmark.sut.registry import find_sut, module_sut

log = logging.getLogger(__name__)

LATENCY_SCENARIOS = ("SingleStream", "MultiStream")
MODEL_SUFFIXES = (".pt", ".pth", ".bin", ".onnx", ".xml")
DEFAULT_API = "sync"
#: how long close() waits for OpenVINO's threads to let go of the async callback (they take
#: microseconds; the bound only turns a would-be deadlock into a warning and a kept model)
CALLBACK_RELEASE_S = 60.0
#: compiled models close() could not release safely: kept alive rather than deadlock
_KEPT_ALIVE: list[Any] = []


class _Completion:
    """The AsyncInferQueue's callback: hands a finished request's outputs to its ``done``.

    A small object of its own, not a bound method, so the queue holds no reference to the
    backend (no cycle for the garbage collector to break on some random thread) and close()
    can watch it die (``__weakref__``)."""

    __slots__ = ("output_index", "__weakref__")

    def __init__(self, output_index: int) -> None:
        self.output_index = output_index

    def __call__(self, request: Any, done: Any) -> None:
        try:
            outputs = request.get_output_tensor(self.output_index).data
        except Exception as exc:  # noqa: BLE001 - reported through done
            done(None, exc)
            return
        done(outputs, None)


class OpenVinoBackend(Backend):
    """One compiled model on the CPU plugin; one InferRequest per calling thread."""

    def __init__(self, model_path: str, precision: str, scenario: str, threads: int,
                 artifact: Any, api: str = "sync", co_located: bool = False,
                 sut: SutInfo | None = None, streams: str = "auto", text: Any = None) -> None:
        if api not in OV_APIS:
            raise UserError(f"{OV_API_OPTION}={api!r}: choose one of {', '.join(OV_APIS)}")
        if streams not in OV_STREAMS:
            raise UserError(f"{OV_STREAMS_OPTION}={streams!r}: choose one of "
                            f"{', '.join(OV_STREAMS)}")
        self.api = api
        self.streams = streams  # "auto": the performance hint's
        #: SingleStream only ever sends one sample: compile for batch 1, as benchmark_app does;
        #: other scenarios send varying batches (a partial last batch, Server's top-ups)
        self.static_batch = 1 if scenario == "SingleStream" else 0
        self.model_path = model_path
        self.precision = precision
        # the registry entry whose proof the load-time check demands
        self.sut = sut or find_sut("openvino", precision)
        self.scenario = scenario
        #: one call at a time with all its cores (latency hint): an ensemble member, whose
        #: ensemble calls it once per batch while other models share the machine
        self.latency_hint = scenario in LATENCY_SCENARIOS or co_located
        self.threads = threads
        self.artifact = artifact
        meta = artifact.meta or {}
        self.layout = meta.get("layout", "NCHW")
        self.label_offset = int(meta.get("label_offset", 0))
        self.output_index = int(meta.get("output_index", 0))
        self._input_hw = meta.get("input_hw")
        #: a text model's feeding (``text.TextInputs``): token inputs by name; None: an image
        self._text = text
        #: the compiled model's input type (f32, or a raw-pixel model's u8), known after load
        self._input_dtype: Any = np.float32
        #: worker threads that keep the compiled model busy (OPTIMAL_NUMBER_OF_INFER_REQUESTS)
        self.preferred_workers: int = 1
        self._compiled: Any = None
        self._local = threading.local()
        self._requests: list[Any] = []
        self._requests_lock = threading.Lock()  # guards the list only, never inference
        self._executed: dict[str, Any] = {}
        self._async_queue: Any = None
        self._async_buffers: dict[tuple[int, int], np.ndarray] = {}
        #: set once the queue's callback object has been freed (see close)
        self._callback_released: threading.Event | None = None

    @property
    def submit(self) -> Any:  # type: ignore[override]
        """The batch path LoadGenSUT drives asynchronously (``ov_api=async``), else None. A
        property, not an attribute holding a bound method: that would be a reference cycle."""
        return self._submit if self.api == "async" else None

    def _config(self) -> dict[Any, Any]:
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints

        mode = (hints.PerformanceMode.LATENCY if self.latency_hint
                else hints.PerformanceMode.THROUGHPUT)
        element = {"fp32": ov.Type.f32, "int8": ov.Type.f32, "bf16": ov.Type.bf16,
                   "fp16": ov.Type.f16}[self.precision]
        config: dict[Any, Any] = {hints.performance_mode: mode, hints.inference_precision: element}
        if self.threads:
            config[props.inference_num_threads] = self.threads
        if self.streams != "auto":
            config[props.num_streams] = ov.properties.streams.Num(int(self.streams))
        return config

    def prepared_model(self, core: Any, static_batch: int | None) -> Any:
        """The IR as this SUT compiles it: a dynamic height or width set to the run's size, the
        batch static (``static_batch``: SingleStream's) or dynamic. The profiler compiles the
        same model."""
        if self._text is not None:  # token inputs by name, at the run's sequence shape
            from quantmark.sut.openvino.text import text_model

            return text_model(core, self.model_path, self._text, static_batch)
        from quantmark.sut.openvino.convert import fix_spatial_dims
        from quantmark.sut.openvino.ir import make_batch_dynamic, make_batch_static

        model = core.read_model(self.model_path)
        if self._input_hw:  # a user's IR with a dynamic height or width: the run's size
            fix_spatial_dims(model, self._input_hw, self.layout)
        if static_batch:
            make_batch_static(model, static_batch)
        else:
            make_batch_dynamic(model)
        return model

    def load(self) -> None:
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints

        core = ov.Core()
        try:
            model = self.prepared_model(core, self.static_batch)
            self._compiled = core.compile_model(model, "CPU", self._config())
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses
            raise SutError(f"openvino could not compile {self.model_path}: {exc}") from exc
        compiled = self._compiled
        if self._text is not None:  # runs on token inputs (before the graph is read)
            from quantmark.sut.openvino.text import prove_runs

            self.output_index = prove_runs(compiled, self._text, self.static_batch or 1,
                                           f"{self.sut.name}: {self.model_path}")
        self._input_dtype = np.dtype(compiled.input(0).get_element_type().to_dtype())
        self.preferred_workers = max(1, int(compiled.get_property(
            props.optimal_number_of_infer_requests)))
        evidence = runtime_evidence(compiled)
        counts = evidence["counts"]
        executed = executed_precision(counts)
        self._executed = {
            "executed_precision": executed,
            "compute_layers_by_precision": counts,
            "compiled": {
                "inference_precision_hint": rt_text(compiled.get_property(
                    hints.inference_precision)),
                "performance_hint": rt_text(compiled.get_property(hints.performance_mode)),
                "num_streams": int(compiled.get_property(props.num_streams)),
                "optimal_number_of_infer_requests": self.preferred_workers,
                "inference_num_threads": int(compiled.get_property(
                    props.inference_num_threads)),
                "execution_devices": list(compiled.get_property(props.execution_devices)),
                "enable_cpu_pinning": bool(compiled.get_property(hints.enable_cpu_pinning)),
            },
            "cpu_capabilities": list(core.get_property("CPU", props.device.capabilities)),
        }
        if "+" in executed:  # say which compute layers run outside the main precision
            main = executed.split("+")[0]
            self._executed["other_precision_layers"] = {
                name: names for name, names in evidence["layers"].items() if name != main}
        if self._text is not None:
            from quantmark.sut.openvino.text import text_evidence

            self._executed["text"] = text_evidence(compiled, self._text, evidence["layers"])
        if is_detector(self.artifact.meta or {}):  # its head: which layers ran it, how
            from quantmark.sut.openvino.detection import head_evidence

            self._executed["detector"] = head_evidence(compiled.get_runtime_model(),
                                                       self.artifact.meta, self.sut.name)
        self._check(counts)

    def _check(self, counts: dict[str, dict[str, int]]) -> None:
        """Refuse to measure one precision under another's name (fp16 -> bf16 excepted)."""
        name = self.sut.name
        ran = sorted(counts)
        if not counts:
            raise SutError(f"{name}: the compiled model has no compute layer (Convolution, "
                           "FullyConnected, MatMul, ...); cannot tell what precision ran")
        if self.precision == "int8":
            if not self.sut.proven(counts):
                raise SutError(f"{name}: no compute layer runs i8/u8 (runtime precisions "
                               f"{ran}); refusing to measure FP32 as INT8")
            return
        if "int8" in counts:
            raise SutError(f"{name}: the model runs INT8 compute layers {counts['int8']}; "
                           "pass an FP32 model (a quantized IR belongs to ov-int8)")
        if self.sut.proven(counts):
            return
        if self.precision == "fp16" and "bf16" in counts:
            capabilities = self._executed["cpu_capabilities"]
            why = ("this CPU has no FP16 arithmetic (the plugin's capabilities "
                   f"{capabilities} lack FP16)" if "FP16" not in capabilities else
                   f"the plugin chose bf16 although its capabilities {capabilities} list FP16")
            note = (f"OpenVINO's CPU plugin ran the f16 inference-precision hint as bf16: {why}; "
                    "the compiled INFERENCE_PRECISION_HINT reads "
                    f"{self._executed['compiled']['inference_precision_hint']}")
            self._executed["precision_note"] = note
            log.warning("ov-fp16 executes bf16: %s", note)
            return
        raise SutError(f"{name}: compute layers run {ran}, not {self.precision} (this CPU "
                       f"lacks {self.precision} support?); refusing to measure "
                       f"{'+'.join(ran)} as {self.precision}")

    def _request(self) -> Any:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._compiled.create_infer_request()
            self._local.request = request
            with self._requests_lock:
                self._requests.append(request)
        return request

    def predict(self, batch: np.ndarray) -> np.ndarray:
        if self.static_batch and len(batch) != self.static_batch:  # other callers: per sample
            return np.concatenate([self.predict(batch[i:i + 1]) for i in range(len(batch))])
        request = self._request()
        inputs = (self._text.feeds(batch) if self._text is not None
                  else {0: np.ascontiguousarray(batch, dtype=self._input_dtype)})
        # share_outputs: views of the request's buffers, reused by its next infer -> copy
        result = request.infer(inputs, share_inputs=True, share_outputs=True)
        return np.array(result[self.output_index], copy=True)

    def _submit(self, count: int, fill: Any, done: Any) -> None:
        """AsyncInferQueue: gather into the idle request's own buffer, start it; the callback
        hands the outputs to ``done`` (on OpenVINO's thread). One feeder thread calls this, so
        the idle id read here is the request ``start_async`` takes."""
        import openvino as ov

        if self._async_queue is None:
            self._async_queue = ov.AsyncInferQueue(self._compiled, self.preferred_workers)
            completion = _Completion(self.output_index)
            released = self._callback_released = threading.Event()
            weakref.finalize(completion, released.set).atexit = False
            self._async_queue.set_callback(completion)
            del completion  # the queue holds the only reference: close() waits for it to go
        queue = self._async_queue
        request_id = queue.get_idle_request_id()  # blocks until a request is free
        buffer = self._async_buffers.get((request_id, count))
        batch = fill(buffer)
        self._async_buffers[(request_id, count)] = batch  # reused once this request is idle
        if self._text is not None:  # feeds cut from the buffer: copied into the request
            queue.start_async(self._text.feeds(batch), userdata=done, share_inputs=False)
            return
        queue.start_async({0: batch}, userdata=done, share_inputs=True)

    def describe(self) -> dict[str, Any]:
        import openvino as ov

        return {
            "framework": "openvino",
            "framework_version": ov.__version__,
            "device": "CPU",
            "requested_precision": self.precision,
            "threads": self._executed.get("compiled", {}).get("inference_num_threads",
                                                               self.threads),
            "model_file": self.model_path,
            "infer_requests_created": len(self._requests),
            **self._executed,
        }

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        from quantmark.sut.openvino.vendor import benchmark_app_command

        compiled = self._executed["compiled"]
        queued = self.api == "async" and (scenario not in LATENCY_SCENARIOS or batch_size > 1)
        return {
            "api": ("InferRequest.infer, one request per worker thread (the GIL is released)"
                    if self.api == "sync" else
                    f"AsyncInferQueue of {self.preferred_workers} requests, one feeder thread"
                    if queued else
                    "InferRequest.infer inline on LoadGen's thread (SingleStream)"),
            "input": self._text.input_note(queued) if self._text is not None else (
                "numpy batch shared with the request (share_inputs=True); OpenVINO "
                "copies a read-only one, as SingleStream's view of the QSL's samples is"),
            "model_batch": self.static_batch or "dynamic",
            **{key: compiled[key] for key in (
                "performance_hint", "num_streams", "optimal_number_of_infer_requests",
                "inference_num_threads", "enable_cpu_pinning", "inference_precision_hint")},
            "threads": compiled["inference_num_threads"],
            "vendor_command": benchmark_app_command(self.model_path,
                                                    "SingleStream" if self.latency_hint
                                                    else scenario, batch_size,
                                                    compiled, explicit=bool(self.threads)
                                                    or self.streams != "auto",
                                                    shapes=self._text.benchmark_shapes(
                                                        batch_size) if self._text else ()),
        }

    def close(self) -> None:
        """Release in dependency order, never holding the GIL while OpenVINO needs it.

        After ``wait_all`` returns, the executor thread that ran the last callback can still
        hold a copy of it for a moment; releasing that copy takes the GIL. Dropping the compiled
        model then would join that thread while holding the GIL: a deadlock (seen). So: wait
        for the requests, drop the queue (its requests and callbacks), wait with the GIL
        released until the callback object is freed, and only then drop the compiled model."""
        queue, self._async_queue = self._async_queue, None
        released, self._callback_released = self._callback_released, None
        try:
            if queue is not None:
                queue.wait_all()
        finally:
            del queue
            self._async_buffers.clear()
            with self._requests_lock:
                self._requests.clear()
            self._local = threading.local()
            compiled, self._compiled = self._compiled, None
            if released is not None and not released.wait(CALLBACK_RELEASE_S):
                _KEPT_ALIVE.append(compiled)  # dropping it could deadlock: keep it instead
                log.warning("openvino: the async callback was not released %.0f s after its "
                            "requests finished; the compiled model %s is kept alive (memory) "
                            "rather than risk a deadlock", CALLBACK_RELEASE_S, self.model_path)
            del compiled


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> OpenVinoBackend:
    """Prepare the IR (convert, and for INT8 quantize; cached), then build the backend.

    ``calibration`` is only touched for INT8: a provider with ``arrays(layout)`` and ``hash()``.
    """
    from quantmark.sut.openvino.convert import ov_fp32_ir, ov_int8_ir

    sut = module_sut(name, __name__)
    precision = sut.precision_key
    path = options.model_path
    if is_text(spec):
        return _create_text(sut, options, spec, calibration)
    if path and not str(path).endswith(MODEL_SUFFIXES):
        raise UserError(f"--model-path {path}: the OpenVINO SUTs take a torch state_dict "
                        "(.pt/.pth/.bin), an .onnx file or an OpenVINO IR .xml (with its .bin) "
                        f"(model {options.model})")
    if path and str(path).endswith(".bin") and Path(path).with_suffix(".xml").is_file():
        raise UserError(f"--model-path {path} is the weights half of an OpenVINO IR; pass "
                        f"{Path(path).with_suffix('.xml')} (the .bin is found beside it)")
    artifact = ov_fp32_ir(spec, path)
    if precision == "int8" and artifact.precision != "int8":  # a quantized user IR runs as is
        layout = (artifact.meta or {}).get("layout", "NCHW")
        artifact = ov_int8_ir(artifact, calibration.arrays(layout), calibration.hash())
    return OpenVinoBackend(str(artifact.path), precision, options.scenario, options.threads,
                           artifact, str(options.extra.get(OV_API_OPTION, DEFAULT_API)),
                           co_located=options.co_located, sut=sut,
                           streams=str(options.extra.get(OV_STREAMS_OPTION, "auto")))


def _create_text(sut: SutInfo, options: SutOptions, spec: Any,
                 calibration: Any) -> OpenVinoBackend:
    """A text model's SUT: its ONNX file (or NNCF INT8 IR) fed token inputs by name."""
    from quantmark.sut.openvino.text import text_sut_model

    artifact, text = text_sut_model(spec, options.model_path, sut.precision_key == "int8",
                                    calibration)
    return OpenVinoBackend(str(artifact.path), sut.precision_key, options.scenario,
                           options.threads, artifact,
                           str(options.extra.get(OV_API_OPTION, DEFAULT_API)),
                           co_located=options.co_located, sut=sut, text=text,
                           streams=str(options.extra.get(OV_STREAMS_OPTION, "auto")))
