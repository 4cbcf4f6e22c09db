"""Flags more than one verb takes, declared once: each verb adds the groups it needs and says
only what differs for it (a default, whether it is required, what the file is for).

A verb's own flags stay in its own module; a flag two verbs share lives here, so its name, type
and parsing are the same wherever it is given."""

from __future__ import annotations

import argparse

from quantmark.ground.errors import UserError

OUTPUT_HELP = "results folder (default results)"
MODEL_PATH_HELP = "your model file (ONNX for the ort SUTs)"
DATASET_HELP = "ImageNet-format folder with val_map.txt"
CALIBRATION_HELP = "INT8 calibration images, one path a line"
SUT_OPTION_HELP = "a SUT's own knob, e.g. tflite_invoke=per-sample (repeatable)"


def model(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
          default: str | None = None, help: str | None = None) -> None:
    """``--model``: a built-in model's name."""
    parser.add_argument("--model", default=default,
                        help=help or "built-in model name (default: the pretrained default)")


def model_and_dataset(parser: argparse.ArgumentParser, *, with_model: bool = True,
                      model_path_help: str = MODEL_PATH_HELP,
                      dataset_help: str = DATASET_HELP) -> argparse._ArgumentGroup:
    """``--model`` (unless the verb names models its own way), ``--model-path``,
    ``--dataset-path`` and ``--calibration-list``."""
    group = parser.add_argument_group("model and dataset")
    if with_model:
        model(group)
    group.add_argument("--model-path", help=model_path_help)
    group.add_argument("--dataset-path", help=dataset_help)
    group.add_argument("--calibration-list", help=CALIBRATION_HELP)
    return group


def output(parser: argparse.ArgumentParser, default: str | None = "results",
           required: bool = False, help: str = OUTPUT_HELP) -> None:
    """``--output``: where the verb writes."""
    parser.add_argument("--output", default=None if required else default, required=required,
                        help=help)


def threads(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
            default: int | None = 0) -> None:
    """``--threads``: the framework's CPU threads."""
    parser.add_argument("--threads", type=int, default=default,
                        help="framework threads (0 = all)")


def batch_size(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
               default: int | None = None, help: str = "samples per predict") -> None:
    """``--batch-size``: samples per predict (a verb that times batches says what it times)."""
    parser.add_argument("--batch-size", type=int, default=default, help=help)


def run_settings(parser: argparse.ArgumentParser, *, with_batch_size: bool = True,
                 from_file: bool = False,
                 sut_option_help: str = SUT_OPTION_HELP) -> argparse._ArgumentGroup:
    """How each run is made: ``--sut-option`` (repeatable), ``--workers``, ``--batch-size``
    and ``--user-conf``. With ``from_file`` (a sweep file may set them) a flag not given is
    None, so the file's value stands."""
    group = parser.add_argument_group("run settings")
    group.add_argument("--sut-option", action="append", default=None if from_file else [],
                       metavar="KEY=VALUE", help=sut_option_help)
    group.add_argument("--workers", type=int, default=None if from_file else 0,
                       help="predict threads in the SUT (default 0: what the framework "
                            "prefers, e.g. OpenVINO's optimal infer requests; else 1)")
    if with_batch_size:
        batch_size(group)
    group.add_argument("--user-conf", help="LoadGen user.conf (validated before use)")
    return group


def key_values(items: list[str] | None) -> dict[str, str]:
    """``--sut-option KEY=VALUE`` strings as a dict; anything else is a one-line error."""
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--sut-option {item!r}: write KEY=VALUE, e.g. "
                            "tflite_invoke=per-sample")
        pairs[key.strip()] = value.strip()
    return pairs
