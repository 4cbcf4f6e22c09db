"""Flags more than one verb takes, declared once: each verb adds the groups it needs and says
only what differs for it (a default, whether it is required, what the file is for).

A verb's own flags stay in its own module; a flag two verbs share lives here, so its name, type
and parsing are the same wherever it is given."""

from __future__ import annotations

import argparse

from quantmark.ground.errors import UserError

OUTPUT_HELP = "results folder (default results)"
MODEL_PATH_HELP = "your model file (ONNX for the ort SUTs)"
DATASET_HELP = ("folder with val_map.txt, or one sub-folder of images per class "
                "(DIR/<class>/<image>)")
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


def model_shape(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The model's own input size, classes, preprocessing and class names, where they are not
    the built-in model's (quantmark.models.workload, quantmark.models.preprocessing)."""
    group = parser.add_argument_group("your model's shape and preprocessing")
    group.add_argument("--input-size", metavar="S|HxW",
                       help="input size: a built-in model at another resolution, or the size "
                            "of a model file whose input is dynamic (e.g. 384 or 224x320)")
    group.add_argument("--num-classes", type=int, default=0,
                       help="classes the model scores (a state_dict with another head)")
    group.add_argument("--preprocess", metavar="PRESET|FILE",
                       help="a preset (imagenet, inception, caffe, cifar10, unit, raw or a "
                            "built-in model's name) or a .json/.toml recipe file")
    group.add_argument("--resize", choices=("short-side", "stretch", "letterbox"),
                       help="short-side: resize the short side, centre crop; stretch: resize "
                            "to the input size; letterbox: fit inside the input keeping the "
                            "aspect ratio, grey padding (as YOLO detectors take images)")
    group.add_argument("--resize-short", type=int, help="short side before the crop")
    group.add_argument("--mean", help="per-channel mean, in pixel units (or 0-1 with --scale "
                                      "255), e.g. 0.485,0.456,0.406")
    group.add_argument("--std", help="per-channel std, same units as --mean")
    group.add_argument("--scale", type=float, help="255: --mean/--std are in 0-1 units")
    group.add_argument("--channel-order", help="RGB (default) or BGR")
    group.add_argument("--labels", help="class names in the model's output order, one a line: "
                                        "maps the dataset's class folders to its indices")
    group.add_argument("--seq-len", type=int, default=0, metavar="N",
                       help="text models: pad (and truncate) every sequence to N tokens "
                            "(default 128)")
    group.add_argument("--padding", choices=("fixed", "dynamic"),
                       help="text models: fixed (every batch at --seq-len, as MLPerf's BERT) "
                            "or dynamic (each batch cut to its longest sequence)")
    group.add_argument("--tokenizer", metavar="PATH",
                       help="text models: tokenizer.json or its folder (default: beside "
                            "--model-path)")
    return group


def shape_fields(args: argparse.Namespace) -> dict:
    """The RunConfig fields ``model_shape``'s flags set, checked (one line each)."""
    from quantmark.models.preprocessing import recipe_data
    from quantmark.models.workload import parse_input_size

    parse_input_size(args.input_size or "")
    if args.num_classes < 0 or args.num_classes == 1:
        raise UserError(f"--num-classes {args.num_classes}: give 2 or more (0: the model's own)")
    flags = {"resize": args.resize, "resize_short": args.resize_short, "mean": args.mean,
             "std": args.std, "scale": args.scale, "channel_order": args.channel_order}
    if args.seq_len < 0:
        raise UserError(f"--seq-len {args.seq_len}: give a token count, e.g. 128")
    return {"input_size": args.input_size or "", "num_classes": args.num_classes,
            "preprocess": recipe_data(args.preprocess, flags), "labels": args.labels,
            "seq_len": args.seq_len, "padding": args.padding or "", "tokenizer": args.tokenizer}


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
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--sut-option {item!r}: write KEY=VALUE, e.g. "
                            "tflite_invoke=per-sample")
        key, value = key.strip(), value.strip()
        if pairs.get(key, value) != value:  # the last would silently win over the first
            raise UserError(f"--sut-option {key} is given twice ({pairs[key]} and {value}); "
                            f"give it once (a list of layers: {key}=A,B)"
                            if key == "keep_float" else
                            f"--sut-option {key} is given twice ({pairs[key]} and {value}); "
                            "give it once")
        pairs[key] = value
    return pairs


def store(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--store URL``: which results store a verb reads or writes (``quantmark.store``)."""
    from quantmark.store.store_settings import STORE_HELP

    parser.add_argument("--store", metavar="URL", help=STORE_HELP)


def series_filters(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--model``, ``--sut``, ``--scenario``, ``--machine``: which series of the results store
    a verb reads (exact names), for ``history`` and ``regress`` alike."""
    group = parser.add_argument_group("filters (exact names; dates are UTC, inclusive)")
    group.add_argument("--model", help="a model's series, e.g. efficientnet-lite0")
    group.add_argument("--sut", help="a SUT's series, e.g. ort-int8")
    group.add_argument("--scenario", help="SingleStream, MultiStream, Offline or Server")
    group.add_argument("--machine", help="jobs of this machine: its fleet node name, else its "
                                         "host name")
    return group
