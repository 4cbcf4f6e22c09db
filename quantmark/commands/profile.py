"""``run.py profile --sut ov-int8 [--against SUT[,SUT...]] [--against-model-path F]``: where a
SUT's inference time goes, layer by layer (named by the canonical ONNX model's layers), against
other SUTs (default: its framework's FP32; the first is the reference of the ranking), each read
with its framework's own profiler; with ``--against-model-path`` the references run model F (a
modified model against its original). A text model's time is also shown by role (attention,
MatMul/Linear, softmax, layernorm, quantize/dequantize ...). Flags -> ``ProfileConfig`` ->
``diagnosis.profile_run`` -> its folder and tables.

Written as ``<output>/<system>/<model>/profile-<sut>-vs-<against>/`` beside the SUT's runs:
results.json (a ``profile`` record), layers.csv and profile.png."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.markup import escape

from quantmark.commands import options
from quantmark.ground import fingerprint
from quantmark.ground.layout import system_id
from quantmark.ground.records import RESULTS, ProfileRecord, write_record
from quantmark.models.workload import file_model_name
from quantmark.models.zoo import DEFAULT_MODEL
from quantmark.report import console_tables as tables
from quantmark.report import profile_tables
from quantmark.run.checks import check_output_writable, validate_inputs
from quantmark.store.recording import record as record_in_store
from quantmark.tasks.catalog import task_for

NAME = "profile"
HELP = "why a SUT is not faster: per-layer time against another SUT, from each profiler"
DESCRIPTION = ("Per-layer time of a SUT's model from its framework's own profiler, against "
               "another SUT (default: its framework's FP32): the layers where it is slower, "
               "ranked by milliseconds lost, its INT8/float/overhead shares (a text model: "
               "its time by role, attention, MatMul/Linear, softmax, layernorm, "
               "quantize/dequantize), and whether the layers add up to the end-to-end time.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sut", required=True, help="the SUT to profile, e.g. ov-int8")
    parser.add_argument("--against", help="reference SUT (default: the framework's FP32); "
                                          "several, comma-separated, sit side by side per "
                                          "ONNX layer, the first ranks the slower layers")
    parser.add_argument("--against-model-path", metavar="F",
                        help="the references run model F instead of --model-path's (why is my "
                             "modified model slower than the original); --against may then "
                             "name --sut itself")
    parser.add_argument("--iterations", type=int, default=50,
                        help="profiled inferences; each layer's time is its median (default 50)")
    parser.add_argument("--warmup", type=int, default=10, help="unprofiled inferences first")
    parser.add_argument("--worst", type=int, default=10, help="slower layers listed")
    options.batch_size(parser, default=1, help="samples per inference (default 1)")
    options.model_and_dataset(parser)
    options.model_shape(parser)
    options.output(parser)
    options.threads(parser)


def profile(args: argparse.Namespace) -> Path:
    """Profile as the flags ask, write the folder, print its tables; the folder."""
    from quantmark.diagnosis import profile_run

    config = profile_run.ProfileConfig(
        model=args.model or file_model_name(args.model_path) or DEFAULT_MODEL, sut=args.sut,
        against=args.against, batch_size=args.batch_size, iterations=args.iterations,
        warmup=args.warmup, worst=args.worst, threads=args.threads, output=args.output,
        dataset_path=args.dataset_path, model_path=args.model_path,
        calibration_list=args.calibration_list, against_model_path=args.against_model_path,
        **options.shape_fields(args))
    # another task's dataset (a detector's COCO or YOLO folder) is its task's to read
    image_folder = task_for(config).name == "classification"
    validate_inputs(config.dataset_path if image_folder else None, config.calibration_list, None)
    check_output_writable(config.output)
    started = time.time()
    found = profile_run.run(config)
    folder = write(found, config, started)
    show(found)
    console.print(f"written to {escape(str(folder))}: results.json, layers.csv, profile.png",
                  soft_wrap=True)
    return folder


def write(found: dict, config: object, started: float) -> Path:
    """The profile's folder: its record (written last), layers.csv and the figure."""
    against = "+".join(found.get("references") or [found["against"]])
    folder = (Path(config.output) / system_id(found["sut"]) / found["model"]
              / f"profile-{found['sut']}-vs-{against}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS).unlink(missing_ok=True)
    profile_tables.write_csv(folder / "layers.csv", found.get("layers", []))
    drawn = profile_tables.write_figure(folder / "profile.png", found)
    record = ProfileRecord.from_dict({
        **found, "figure": "profile.png" if drawn else None,
        "config": dict(vars(config)), "system_id": system_id(found["sut"]),
        "machine": fingerprint.machine(),
        "times": {"started_at": started, "ended_at": time.time()}}, str(folder))
    write_record(folder / RESULTS, record)
    record_in_store(folder / RESULTS)
    return folder


def show(found: dict) -> None:
    """The slower layers, every layer, every SUT side by side, where each side's time goes."""
    profile_tables.print_profile(console, found)
