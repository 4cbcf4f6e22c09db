"""``run.py export --sut tflite-fp32,tflite-int8 ...``: .tflite artifacts (with their
calibration record) for a device that runs but cannot convert, such as a Raspberry Pi."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from quantmark.commands import options
from quantmark.models.exported import record_path
from quantmark.models.zoo import DEFAULT_MODEL
from quantmark.report import console_tables as tables
from quantmark.run import tflite_export as exporting
from quantmark.run.checks import check_output_writable, validate_inputs

NAME = "export"
HELP = "write .tflite artifacts for a device that runs but cannot convert (a Raspberry Pi)"
DESCRIPTION = ("Write .tflite artifacts (with their calibration record) for a device that runs "
               "but cannot convert, such as a Raspberry Pi.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sut", required=True, help="comma-separated TFLite SUTs, e.g. "
                                                     "tflite-fp32,tflite-int8")
    options.model_and_dataset(parser,
                              model_path_help="your model (.pt/.onnx/SavedModel) to convert",
                              dataset_help="ImageNet-format folder (calibration source)")
    options.output(parser, required=True, help="folder to write the artifacts into")


def main(args: argparse.Namespace) -> int:
    """Export .tflite artifacts for a device, then say how to run them there."""
    suts = exporting.parse_suts(args.sut)
    validate_inputs(args.dataset_path, args.calibration_list, None)
    check_output_writable(args.output)
    written = exporting.export(suts, args.model or DEFAULT_MODEL, args.output, args.model_path,
                               args.dataset_path, args.calibration_list)
    for path in written:
        console.print(f"exported {escape(str(path))} (+ {escape(record_path(path).name)})",
                      soft_wrap=True)
    out = Path(args.output)
    dataset = out / exporting.DATASET_DIR
    dataset_flag = (f"--dataset-path {dataset}" if dataset.is_dir() and not args.dataset_path
                    else "--dataset-path YOUR_IMAGENET_FOLDER")
    console.print(f"copy {escape(str(out))} to the device, then run there, e.g.:\n  python run.py "
                  f"--scenario SingleStream --sut {suts[-1]} --model-path "
                  f"{escape(str(written[-1]))} {escape(dataset_flag)}", soft_wrap=True)
    return 0
