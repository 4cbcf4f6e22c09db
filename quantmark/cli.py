"""quantmark's command line: flags -> a plain RunConfig -> the part that acts.

``run.py`` at the top of the repository and the ``quantmark`` console script both call ``main``::

    python run.py                                   # the built-in default job
    python run.py --scenario Offline --sut ort-int8 [--model resnet50] ...
    python run.py --official --all-tests --scenario Offline --sut ort-int8 --model resnet50
    python run.py --audit TEST01 --scenario Offline --sut ort-int8   # one compliance test
    python run.py submission --results DIR --submitter NAME --division open --output DIR
    python run.py sweep --models resnet50 --suts ort-fp32,ort-int8 --output DIR   # or FILE
    python run.py node --head | --address HEAD:6379   # a Ray node; then sweep --cluster auto
    python run.py --list-suts
    python run.py report DIR [DIR ...] [--output DIR]
    python run.py --scenario Offline --sut ort-int8 --repeats 5   # median and 95% interval
    python run.py compare RESULTS_A RESULTS_B        # ratio of two sets of runs, with interval
    python run.py export --sut tflite-fp32,tflite-int8 --model mobilenetv2 --output DIR  # for a Pi
    python run.py train-bench --model resnet50 --framework torch --precision fp32,amp --steps 20
    python run.py diagnose --sut ort-int8 [--against ov-fp32] [--recover 8]  # INT8 layer by layer
"""

from __future__ import annotations

import argparse
import sys

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError, environment_fault


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see python run.py --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py", description="MLPerf-style inference benchmarks.")
    parser.add_argument("--scenario", help="SingleStream, MultiStream, Offline or Server")
    parser.add_argument("--sut", help="system under test, e.g. ort-int8 (see --list-suts)")
    parser.add_argument("--model", help="built-in model name (default: the pretrained default)")
    parser.add_argument("--model-path", help="your model file (ONNX for the ort SUTs)")
    parser.add_argument("--mode", default="performance", help="performance or accuracy")
    parser.add_argument("--dataset-path", help="ImageNet-format folder with val_map.txt")
    parser.add_argument("--calibration-list", help="INT8 calibration images, one path a line")
    parser.add_argument("--user-conf", help="LoadGen user.conf (validated before use)")
    parser.add_argument("--output", default="results", help="results folder (default results)")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per predict")
    parser.add_argument("--threads", type=int, default=0, help="framework threads (0 = all)")
    parser.add_argument("--workers", type=int, default=0,
                        help="predict threads in the SUT (default 0: what the framework "
                             "prefers, e.g. OpenVINO's optimal infer requests; else 1)")
    parser.add_argument("--sut-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a SUT's own knob, e.g. tflite_invoke=per-sample (repeatable)")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--quick", action="store_true", help="short development run (default)")
    runs.add_argument("--official", action="store_true",
                      help="mlperf.conf untouched (600 s minimum), user.conf as given")
    parser.add_argument("--audit", choices=("TEST01", "TEST04"),
                        help="run one compliance test and judge it against the normal runs")
    parser.add_argument("--all-tests", action="store_true",
                        help="performance, accuracy, TEST01 and TEST04, each in its own process")
    parser.add_argument("--list-suts", action="store_true", help="list SUTs and exit")
    parser.add_argument("--ensemble", metavar="MODEL@SUT,...",
                        help="an ensemble of co-located models in one process, e.g. "
                             "efficientnet-lite0@ort-int8,efficientnet-lite1@ov-int8; "
                             "performance runs each member alone too (the baseline)")
    parser.add_argument("--ensemble-mode", default="both",
                        help="sequential (one worker runs the members in turn), concurrent "
                             "(one thread per member, cores split) or both (default)")
    parser.add_argument("--combine", default="mean",
                        help="mean of the members' softmax probabilities (default) or vote")
    parser.add_argument("--no-baselines", action="store_true",
                        help="with --ensemble: skip the runs of each member alone")
    parser.add_argument("--repeats", type=int, default=None,
                        help="run the performance test N times, each in a fresh process, and "
                             "print the median with its 95%% interval (default 1; the default "
                             "job: 3, interleaved)")
    parser.add_argument("--until-stable", type=float, default=None, metavar="PCT",
                        help="repeat (at least 3 runs) until the interval's half-width is under "
                             "PCT percent of the median, or --max-repeats runs were made")
    parser.add_argument("--max-repeats", type=int, default=10,
                        help="cap on --until-stable's runs (default 10)")
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py compare",
                     description="How many times faster B is than A, with its 95%% interval: "
                                 "'no measurable difference' when the interval holds 1.0.")
    parser.add_argument("a", help="results folder, run folder or sweep cell "
                                  "(SWEEP/runs/<model>/<sut>/<scenario>-b<batch>)")
    parser.add_argument("b", help="the same, for the other side")
    parser.add_argument("--paired", action="store_true",
                        help="the runs were made side by side, interleaved (A1 B1 A2 B2 ...): "
                             "pair them by repeat so drift cancels")
    return parser


def build_submission_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py submission",
                     description="Package finished official runs as an MLPerf submission tree.")
    parser.add_argument("--results", required=True, help="the --output folder of your runs")
    parser.add_argument("--submitter", required=True, help="organisation name")
    parser.add_argument("--division", required=True, choices=("open", "closed"))
    parser.add_argument("--output", required=True, help="new folder for the submission tree")
    parser.add_argument("--system-file", help="JSON with system fields the machine cannot tell "
                                              "(cooling, memory configuration, ...)")
    parser.add_argument("--status", default="available", help="available, preview or rdi")
    parser.add_argument("--system-type", default="edge", help="edge, datacenter or both")
    return parser


def build_sweep_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py sweep",
                     description="Run every model x SUT x scenario x batch size x repeat, each "
                                 "cell in its own process; resumable.")
    parser.add_argument("file", nargs="?", help="sweep file (.toml, .yaml): the same settings "
                                                "as the flags; flags given override it")
    parser.add_argument("--models", help="comma-separated, e.g. resnet50,mobilenetv2")
    parser.add_argument("--suts", help="comma-separated SUT names, or cpu / gpu / all")
    parser.add_argument("--ensemble", dest="ensembles", action="append", metavar="MODEL@SUT,...",
                        help="an ensemble to sweep too, with each member alone (repeatable)")
    parser.add_argument("--ensemble-modes", help="sequential,concurrent (default both)")
    parser.add_argument("--scenarios", help="comma-separated (default Offline,SingleStream)")
    parser.add_argument("--batch-sizes", help="comma-separated, e.g. 1,8,32 (default 8; "
                                              "SingleStream always runs batch 1)")
    parser.add_argument("--repeats", type=int, help="runs of each cell (default 1)")
    parser.add_argument("--output", help="sweep folder (default sweep)")
    parser.add_argument("--seconds", type=float, help="quick runs' minimum duration (default 10)")
    parser.add_argument("--official", action="store_true", default=None,
                        help="official runs (600 s each) instead of quick ones")
    parser.add_argument("--no-accuracy", dest="accuracy", action="store_false", default=None,
                        help="skip the accuracy run of each model x SUT")
    parser.add_argument("--timeout", type=float, help="seconds per cell (default 1800)")
    parser.add_argument("--threads", type=int, help="framework threads (0 = all)")
    parser.add_argument("--dataset-path", help="ImageNet-format folder with val_map.txt")
    parser.add_argument("--calibration-list", help="INT8 calibration images, one path a line")
    parser.add_argument("--user-conf", help="LoadGen user.conf for every cell")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun failed and timed-out cells too (finished ones are skipped)")
    parser.add_argument("--cluster", metavar="auto|HOST:PORT|ray://HOST:PORT",
                        help="run the cells as Ray tasks on this cluster (start its nodes with "
                             "run.py node)")
    parser.add_argument("--place", dest="placement", action="append",
                        metavar="SUT_PATTERN:REQ,...",
                        help="where matching SUTs' cells run: arch=, isa=, core=, board=, node= "
                             "or gpu, e.g. 'tflite-*:arch=aarch64' (repeatable; needs --cluster)")
    return parser


def build_node_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py node",
                     description="Start this machine as a Ray node for run.py sweep --cluster, "
                                 "with its architecture, instruction sets, core, board and the "
                                 "SUTs it can run as resources that --place rules select.")
    parser.add_argument("--head", action="store_true", help="start the cluster's head here")
    parser.add_argument("--address", help="join the cluster whose head is HEAD:PORT")
    parser.add_argument("--port", type=int, default=6379, help="the head's port (default 6379)")
    parser.add_argument("--name", help="this node's name in reports and --place node= "
                                       "(default: the host name)")
    parser.add_argument("--no-cells", action="store_true",
                        help="coordinate only: run no cells on this machine")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the ray start command and its resources, start nothing")
    parser.add_argument("ray_args", nargs="*", metavar="-- RAY_START_ARGS",
                        help="more ray start flags after --, e.g. -- --num-gpus=1")
    return parser


def build_export_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py export",
                     description="Write .tflite artifacts (with their calibration record) for a "
                                 "device that runs but cannot convert, such as a Raspberry Pi.")
    parser.add_argument("--sut", required=True, help="comma-separated TFLite SUTs, e.g. "
                                                     "tflite-fp32,tflite-int8")
    parser.add_argument("--model", help="built-in model name (default: the pretrained default)")
    parser.add_argument("--model-path", help="your model (.pt/.onnx/SavedModel) to convert")
    parser.add_argument("--dataset-path", help="ImageNet-format folder (calibration source)")
    parser.add_argument("--calibration-list", help="INT8 calibration images, one path a line")
    parser.add_argument("--output", required=True, help="folder to write the artifacts into")
    return parser


def build_diagnose_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py diagnose",
                     description="Where a reduced-precision SUT loses accuracy: every layer's "
                                 "output against its framework's FP32 (or --against), the worst "
                                 "layers, and with --recover the measured way back.")
    parser.add_argument("--sut", required=True, help="the SUT to diagnose, e.g. ort-int8")
    parser.add_argument("--model", help="built-in model name (default: the pretrained default)")
    parser.add_argument("--against", help="reference SUT (default: the framework's FP32)")
    parser.add_argument("--samples", type=int, default=32,
                        help="evaluation samples captured layer by layer (default 32)")
    parser.add_argument("--worst", type=int, default=10, help="layers listed (default 10)")
    parser.add_argument("--recover", type=int, default=0, metavar="K",
                        help="re-quantize with the worst 1, 2, 4 ... K layers in FP32 and "
                             "measure top-1 and speed of each (default 0: no)")
    parser.add_argument("--damage", action="append", metavar="LAYER=FACTOR",
                        help="inject a fault to test the diagnosis: LAYER's INT8 weights "
                             "quantized over a range FACTOR times too wide (ort-int8, "
                             "tflite-int8, torch-int8); repeatable")
    parser.add_argument("--eval-samples", type=int,
                        help="evaluation samples the recovery curve scores (default: all)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved speed rounds of the recovery curve (default 5)")
    parser.add_argument("--round-seconds", type=float, default=1.0,
                        help="seconds each model is timed per round (default 1)")
    parser.add_argument("--batch-size", type=int, default=8, help="batch timed (default 8)")
    parser.add_argument("--threads", type=int, default=0, help="framework threads (0: all)")
    parser.add_argument("--output", default="results", help="results folder (default results)")
    parser.add_argument("--dataset-path", help="ImageNet-format folder (default: built-in)")
    parser.add_argument("--model-path", help="your FP32 model (.pt/.onnx ...) to diagnose")
    parser.add_argument("--calibration-list", help="INT8 calibration images, one path a line")
    return parser


def build_report_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py report",
                     description="Tables (and, for sweeps, figures and HTML) of results folders.")
    parser.add_argument("folders", nargs="+", help="results or sweep folders; several merge")
    parser.add_argument("--output", help="where the characterization report goes (default: "
                                         "the sweep folder, when there is one)")
    return parser


def build_train_bench_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run.py train-bench",
                     description="Training step time, images/s and peak memory, FP32 vs mixed "
                                 "precision (fp16 + loss scaling on a GPU, bf16 autocast on a "
                                 "CPU), on synthetic data; each precision in its own process.")
    parser.add_argument("--model", default="resnet50", help="zoo model (default resnet50)")
    parser.add_argument("--framework", default="torch", help="torch or tf (or torch,tf)")
    parser.add_argument("--precision", default="fp32,amp", help="comma-separated: fp32, amp "
                                                                "(default fp32,amp)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first (default 3; their time is recorded apart)")
    parser.add_argument("--batch-size", type=int, help="default 32 on a GPU, 8 on a CPU")
    parser.add_argument("--image-size", type=int,
                        help="square input side (default: the model's, 224)")
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu "
                                                         "or gpu")
    parser.add_argument("--threads", type=int, default=0,
                        help="the framework's CPU threads (default 0: all cores)")
    parser.add_argument("--output", default="results/train-bench",
                        help="folder for the JSONs and the summary (default results/train-bench)")
    return parser


def config_from_args(args: argparse.Namespace, ensemble: bool = False) -> RunConfig:
    """The run the flags ask for; with ``ensemble`` the base the ensemble's runs start from
    (``--ensemble`` names the models and SUTs)."""
    from quantmark.models.exported import exported_model
    from quantmark.models.zoo import DEFAULT_MODEL

    if ensemble:
        if args.sut or args.model or args.model_path:
            raise UserError("--ensemble names each member's model and SUT (MODEL@SUT,...): "
                            "drop --sut, --model and --model-path")
        if not args.scenario:
            raise UserError("give --scenario with --ensemble, e.g. --scenario Offline")
        args.sut, args.model = "ensemble", DEFAULT_MODEL  # replaced by the ensemble's runs
    elif not args.scenario or not args.sut:
        raise UserError("give both --scenario and --sut (or no flags for the default job)")
    batch = args.batch_size
    if batch is None:
        batch = 8 if args.scenario in ("Offline", "MultiStream") else 1
    return RunConfig(
        scenario=args.scenario, sut=args.sut,
        model=args.model or exported_model(args.model_path) or DEFAULT_MODEL,
        mode=args.mode, quick=not args.official, model_path=args.model_path,
        dataset_path=args.dataset_path, calibration_list=args.calibration_list,
        user_conf=args.user_conf, output=args.output, batch_size=batch,
        threads=args.threads, workers=args.workers, audit=args.audit or "",
        sut_options=_key_values(args.sut_option),
    )


def _key_values(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; anything else is a one-line error."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"--sut-option {item!r}: write KEY=VALUE, e.g. "
                            "tflite_invoke=per-sample")
        pairs[key.strip()] = value.strip()
    return pairs


def main(argv: list[str] | None = None) -> int:
    from quantmark import commands
    from quantmark.ground import logs

    logs.setup()
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["submission"]:
            commands.submission(build_submission_parser().parse_args(argv[1:]))
        elif argv[:1] == ["sweep"]:
            return commands.sweep(build_sweep_parser().parse_args(argv[1:]))
        elif argv[:1] == ["node"]:
            from quantmark.sweep.fleet.ray_node import start

            return start(build_node_parser().parse_args(argv[1:]))
        elif argv[:1] == ["export"]:
            commands.export(build_export_parser().parse_args(argv[1:]))
        elif argv[:1] == ["train-bench"]:
            commands.train_bench(build_train_bench_parser().parse_args(argv[1:]))
        elif argv[:1] == ["diagnose"]:
            from quantmark.diagnosis.command import diagnose

            diagnose(build_diagnose_parser().parse_args(argv[1:]))
        elif argv[:1] == ["compare"]:
            args = build_compare_parser().parse_args(argv[1:])
            commands.compare(args.a, args.b, args.paired)
        elif argv[:1] == ["report"]:
            args = build_report_parser().parse_args(argv[1:])
            commands.report(args.folders, args.output)
        elif not argv:
            commands.default_job("results")
        else:
            args = build_parser().parse_args(argv)
            if args.list_suts:
                commands.list_suts()
            elif args.ensemble:
                return commands.run_ensemble(args, config_from_args(args, ensemble=True))
            elif args.all_tests:
                return 0 if commands.all_tests(config_from_args(args)) else 1
            elif args.audit:
                return 0 if commands.run_audit(config_from_args(args)) else 1
            elif not args.scenario and not args.sut and not args.model:
                commands.default_job(args.output, args.repeats)
            elif args.repeats is not None or args.until_stable is not None:
                commands.run_repeated(config_from_args(args), 1 if args.repeats is None
                                      else args.repeats, args.until_stable, args.max_repeats)
            else:
                commands.run_one(config_from_args(args))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SutError as exc:
        print(f"SUT failed: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; the one in progress was discarded",
              file=sys.stderr)
        return 130
    except OSError as exc:  # disk full, permissions, a file in the way: named, not a traceback
        fault = environment_fault(exc)
        if fault is None:
            raise
        print(f"error: {fault}", file=sys.stderr)
        return 2
    return 0
