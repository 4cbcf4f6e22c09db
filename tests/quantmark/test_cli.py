"""run.py as a user runs it: every scenario end to end, the report, and each bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from quantmark.report.percentiles import min_queries
from tests.conftest import run_cli

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")


def tiny_onnx(path: Path) -> Path:
    """A small real CNN over 224x224 images: fast enough to run all four scenarios in tests,
    yet ~1-2 ms a sample, so predict (not the harness) dominates a query as with real models."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.2, (16, 3, 8, 8)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.zeros(16, np.float32), "b1"),
        numpy_helper.from_array(rng.normal(0, 0.1, (64, 16, 3, 3)).astype(np.float32), "w3"),
        numpy_helper.from_array(np.zeros(64, np.float32), "b3"),
        numpy_helper.from_array(rng.normal(0, 0.05, (64, 64, 3, 3)).astype(np.float32), "w4"),
        numpy_helper.from_array(np.zeros(64, np.float32), "b4"),
        numpy_helper.from_array(rng.normal(0, 0.5, (1000, 64)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.zeros(1000, np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], strides=[4, 4]),
        helper.make_node("Relu", ["c1"], ["r0"]),
        helper.make_node("Conv", ["r0", "w3", "b3"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w4", "b4"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p1"]),
        helper.make_node("Flatten", ["p1"], ["f1"]),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_onnx(tmp_path_factory.mktemp("model") / "tiny.onnx")


@pytest.fixture(scope="module")
def short_conf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conf") / "user.conf"
    # A 1 s Server run has ~700 queries, so early stopping tolerates only a few over the quick
    # 50 ms bound: one scheduler stall of a shared CI machine made it INVALID. These tests check
    # the logs and the layout, not the machine's jitter; a 2 s bound keeps them about that.
    path.write_text("*.*.min_duration = 1000\n*.Server.target_latency = 2000\n")
    return path


@pytest.fixture(scope="module")
def scenario_runs(tmp_path_factory, tiny, short_conf, quantmark_cache):
    out = tmp_path_factory.mktemp("results")
    procs = {}
    for scenario in SCENARIOS:
        procs[scenario] = run_cli("--scenario", scenario, "--sut", "ort-int8", "--model",
                                  "mobilenetv2", "--model-path", str(tiny), "--user-conf",
                                  str(short_conf), "--output", str(out), timeout=600)
    return out, procs


def valid_or_machine_timing(folder: Path) -> bool:
    """VALID, or INVALID only because a 1 s quick run met a machine that changed speed under
    it (a busy CI machine: the warm-up's rate, and then its one rerun's, were off), which these
    layout tests do not judge: the minimum duration is then the one check LoadGen says failed,
    and the run is the rerun quantmark made for it (results.json config.rerun)."""
    summary = (folder / "mlperf_log_summary.txt").read_text()
    if "Result is : VALID" in summary:
        return True
    unmet = re.findall(r"^\s*(.+?) satisfied : NO", summary, re.M)
    rerun = json.loads((folder / "results.json").read_text())["config"].get("rerun")
    return unmet == ["Min duration"] and bool(rerun)


def _run_folder(out: Path, scenario: str, mode: str = "performance") -> Path:
    folders = list(out.glob(f"*-ort-int8/mobilenetv2/{scenario}/"
                            f"{'performance/run_1' if mode == 'performance' else 'accuracy'}"))
    assert len(folders) == 1, folders
    return folders[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_leaves_valid_logs_in_layout(scenario_runs, scenario, tiny):
    out, procs = scenario_runs
    proc = procs[scenario]
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = _run_folder(out, scenario)
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json",
                 "results.json", "user.conf", "NOT_VALID_FOR_SUBMISSION.txt"):
        assert (folder / name).is_file(), name
    summary = (folder / "mlperf_log_summary.txt").read_text()
    assert valid_or_machine_timing(folder), summary[:900]
    results = json.loads((folder / "results.json").read_text())
    assert results["settings"]["mode"] == "quick"
    assert results["sut"]["executed_precision"] == "int8"
    assert results["sut"]["compute_nodes_by_precision"]["int8"] > 0
    assert results["model"]["weights"].startswith("user")
    for key in ("cpu_model", "logical_cpus"):
        assert results["machine"][key]
    assert results["software"]["onnxruntime"]
    assert results["dataset"]["fingerprint"] and results["model"]["key"]
    speed = results["speed_settings"]  # what a like-for-like rerun in another tool needs
    assert speed["api"].startswith("InferenceSession.run") and speed["threads"] >= 1
    assert speed["scenario"] == scenario
    assert speed["batch_size"] == results["config"]["batch_size"]
    assert speed["workers"] == results["settings"]["workers"]
    assert speed["process_cpus"] <= speed["online_cpus"]
    assert "--sut ort-int8 --model mobilenetv2" in speed["reference_command"]
    assert f"--model-path {tiny}" in speed["reference_command"]


def test_report_shows_loadgen_percentiles(scenario_runs):
    out, _ = scenario_runs
    proc = run_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = (out / "report.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 1 + len(SCENARIOS)
    for line in rows[1:]:
        row = dict(zip(header, line.split(","), strict=True))
        summary = (out / row["path"] / "mlperf_log_summary.txt").read_text()
        queries = int(row["queries"])
        for column, pct in (("p50_ms", "50.00"), ("p90_ms", "90.00"), ("p99_ms", "99.00")):
            pattern = rf"^{re.escape(pct)} percentile latency \(ns\)\s*:\s*(\d+)"
            ns = int(re.search(pattern, summary, re.M).group(1))
            # none for Offline, none resting on the slowest query alone (too few queries)
            shown = row["scenario"] != "Offline" and queries >= min_queries(pct)
            assert row[column] == (f"{ns / 1e6:.3f}" if shown else ""), (row, queries)
        assert valid_or_machine_timing(out / row["path"])
        assert row["validity"] == ("VALID" if "Result is : VALID" in summary else "INVALID")
    assert (out / "report.md").read_text().count("| ort-int8 |") == len(SCENARIOS)


def test_accuracy_mode_issues_each_sample_once(tiny, short_conf, tmp_path, quantmark_cache):
    proc = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model", "mobilenetv2",
                   "--model-path", str(tiny), "--mode", "accuracy", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = next(tmp_path.glob("*-ort-fp32/mobilenetv2/Offline/accuracy"))
    entries = json.loads((folder / "mlperf_log_accuracy.json").read_text())
    results = json.loads((folder / "results.json").read_text())
    total = results["dataset"]["evaluation_count"]
    indices = [entry["qsl_idx"] for entry in entries]
    assert sorted(indices) == list(range(total))  # every sample exactly once
    first = (folder / "accuracy.txt").read_text().splitlines()[0]
    assert re.fullmatch(r"accuracy=\d+\.\d{3}%, good=\d+, total=" + str(total), first)


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    # progress notes ("[quantmark.qsl] preprocessing ...") may precede; the error is one line
    lines = [line for line in proc.stderr.strip().splitlines()
             if not line.startswith("[quantmark.")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_unknown_names(tmp_path):
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-int4"),
                    "unknown SUT 'ort-int4'", "ort-int8")
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-int8", "--model", "vgg99"),
                    "vgg99", "resnet50")
    _one_line_error(run_cli("--scenario", "Ofline", "--sut", "ort-int8"),
                    "unknown scenario 'Ofline'", "SingleStream")


def test_framework_not_installed_names_the_extra():
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "trt-int8"), "NVIDIA GPU",
                    "quantmark[trt]")


def test_dataset_problems(tmp_path):
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32",
                            "--dataset-path", str(tmp_path / "nope")), "does not exist")
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32",
                            "--dataset-path", str(tmp_path)), "val_map.txt")


def test_image_that_will_not_decode(tmp_path, tiny, quantmark_cache):
    from PIL import Image

    for number in range(3):
        Image.new("RGB", (300, 260), (number * 40, 90, 200)).save(tmp_path / f"img{number}.jpg")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 this is not a jpeg")
    (tmp_path / "val_map.txt").write_text(
        "img0.jpg 1\nimg1.jpg 2\nbroken.jpg 3\nimg2.jpg 4\n")
    line = _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model",
                                   "mobilenetv2", "--model-path", str(tiny), "--dataset-path",
                                   str(tmp_path), "--output", str(tmp_path / "out")),
                           "broken.jpg")
    assert "3" in line  # its val_map line


def test_user_conf_unknown_key_names_the_line(tmp_path):
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.target_qps = 10\nresnet50.Offline.target_qsp = 5\n")
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--user-conf",
                            str(conf)), f"{conf}:2", "target_qsp")


def test_output_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--output",
                            str(blocker / "out")), "not writable")


def test_missing_model_file(tmp_path):
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model-path",
                            str(tmp_path / "missing.onnx")), "missing.onnx", "does not exist")


def test_bad_flag_is_one_line():
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--batch-size", "x"),
                    "--batch-size")


def test_a_fixed_batch_onnx_at_the_default_batch_is_exit_2(tmp_path, tiny, quantmark_cache):
    import onnx

    model = onnx.load(tiny)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 1  # as exported without dynamic axes
    onnx.save(model, tmp_path / "fixed.onnx")
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model",
                            "mobilenetv2", "--model-path", str(tmp_path / "fixed.onnx"),
                            "--output", str(tmp_path / "out")),
                    "fixed batch of 1; pass --batch-size 1")


@pytest.mark.parametrize("count", ["0", "-3"])
def test_repeats_below_one_are_refused_not_run_once(tmp_path, count):
    _one_line_error(run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--repeats", count,
                            "--output", str(tmp_path / "out")), f"--repeats {count}")
    assert not (tmp_path / "out").exists()


def test_shipped_user_confs_are_valid():
    from quantmark.models.zoo import MODEL_NAMES
    from quantmark.scenarios.userconf import parse_user_conf

    confs = sorted((Path(__file__).resolve().parents[2] / "user_confs").glob("*.conf"))
    assert len(confs) == 4
    for conf in confs:
        parse_user_conf(conf, tuple(MODEL_NAMES))


def test_list_suts_shows_every_sut_and_reasons():
    proc = run_cli("--list-suts")
    assert proc.returncode == 0
    assert "trt-int8" in proc.stdout and "NVIDIA GPU" in proc.stdout
    assert re.search(r"ort-int8 .*yes", proc.stdout)


def test_sut_failure_keeps_the_good_run_and_the_failed_logs(tiny, short_conf, tmp_path,
                                                            quantmark_cache):
    from quantmark.ground.config import RunConfig
    from tests.conftest import run_python

    good = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model", "mobilenetv2",
                   "--model-path", str(tiny), "--user-conf", str(short_conf), "--output",
                   str(tmp_path))
    assert good.returncode == 0, good.stderr[-2000:]
    run_1 = next(tmp_path.glob("*-ort-fp32/mobilenetv2/Offline/performance/run_1"))
    before = (run_1 / "mlperf_log_detail.txt").read_text()

    config = RunConfig(scenario="Offline", sut="ort-fp32", model="mobilenetv2",
                       model_path=str(tiny), user_conf=str(short_conf), output=str(tmp_path),
                       batch_size=8)
    (tmp_path / "config.json").write_text(config.to_json())
    # predict starts failing once LoadGen runs (after the warm-up measurement, which also
    # goes through the worker path)
    proc = run_python(f"""
        import sys
        import quantmark.sut.base as base
        def broken(self, batch, count):
            raise RuntimeError("injected predict failure")
        start = base.LoadGenSUT.start
        def start_broken(self):
            base.LoadGenSUT._classify = broken
            return start(self)
        base.LoadGenSUT.start = start_broken
        from quantmark.run.test_process import main
        sys.exit(main([{str(tmp_path / 'config.json')!r}, {str(tmp_path / 'status.json')!r}]))
    """, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["status"] == "failed" and "injected predict failure" in status["message"]
    failed = run_1.with_name("run_1.failed")
    assert "injected predict failure" in (failed / "predict_error.txt").read_text()
    assert (run_1 / "mlperf_log_detail.txt").read_text() == before  # the good run is untouched
    assert not list(run_1.parent.glob(".run_1.tmp-*"))
    report = run_cli("report", str(tmp_path))
    assert report.returncode == 0
    assert "FAILED" in (tmp_path / "report.csv").read_text()


# --- the dispatcher: verbs found, not listed (every command line the README and the docs
# show parses: tests/docs/test_commands.py) ----------------------------------------------


def test_no_verb_is_the_run_verb_and_no_flags_the_default_job(monkeypatch):
    from quantmark import cli
    from quantmark.commands import run as run_verb

    jobs: list[tuple] = []
    monkeypatch.setattr(run_verb, "default_job", lambda *a: jobs.append(a))
    assert cli.main([]) == 0
    assert cli.main(["--output", "elsewhere", "--repeats", "5"]) == 0
    assert jobs == [("results", None), ("elsewhere", 5)]
    verb, args = cli.parse(["--scenario", "Offline", "--sut", "ort-int8"])
    assert verb is run_verb and (args.scenario, args.sut, args.batch_size) == (
        "Offline", "ort-int8", None)


def test_a_bad_flag_names_its_verbs_help(capsys):
    from quantmark import cli

    assert cli.main(["sweep", "--models", "m", "--no-such-flag"]) == 2
    assert capsys.readouterr().err == ("error: unrecognized arguments: --no-such-flag (see "
                                       "python run.py sweep --help)\n")
    assert cli.main(["--scenario", "Offline", "--sut", "ort-int8", "--workers", "many"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--workers" in err and "(see python run.py --help)" in err


def test_the_sweep_takes_the_run_settings_and_leaves_the_file_its_own():
    """``--sut-option`` (repeatable), ``--workers`` and ``--model-path`` reach the sweep's
    namespace; one not given is None, so a sweep file's value stands."""
    from quantmark import cli

    verb, args = cli.parse(["sweep", "--models", "mobilenetv2", "--suts", "ov-int8",
                            "--sut-option", "ov_api=sync,async", "--sut-option", "x=1",
                            "--workers", "2", "--model-path", "m.onnx"])
    assert verb.NAME == "sweep"
    assert (args.sut_option, args.workers, args.model_path) == (
        ["ov_api=sync,async", "x=1"], 2, "m.onnx")
    _, bare = cli.parse(["sweep", "my-sweep.toml"])
    assert bare.file == "my-sweep.toml"
    assert [bare.sut_option, bare.workers, bare.threads, bare.user_conf, bare.output] == [
        None] * 5


@pytest.fixture
def hello_verb(tmp_path, monkeypatch):
    """A verb that is only a new module beside the others (the package's path widened to a
    folder holding it)."""
    import sys

    from quantmark import commands

    (tmp_path / "hello.py").write_text(
        'NAME = "hello-there"\nHELP = "say hello"\n\n\n'
        "def add_arguments(parser):\n"
        '    parser.add_argument("--to", default="world")\n\n\n'
        "def main(args):\n"
        '    print(f"hello {args.to}")\n'
        "    return 7\n")
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    yield "hello-there"
    sys.modules.pop("quantmark.commands.hello", None)
    vars(commands).pop("hello", None)


def test_a_new_verb_is_one_new_module(hello_verb, capsys):
    from quantmark import cli

    assert cli.main([hello_verb, "--to", "you"]) == 7
    assert capsys.readouterr().out == "hello you\n"
    with pytest.raises(SystemExit):  # the default verb's help lists it
        cli.main(["--help"])
    assert "say hello" in capsys.readouterr().out


def test_starting_any_verb_imports_no_framework_or_statistics():
    """The lean Raspberry Pi install (LoadGen, numpy, pillow) starts every verb: the verb
    modules import their heavy parts only when they run."""
    from tests.conftest import run_python

    proc = run_python("""
        import json, sys
        from quantmark import cli, commands
        cli.build_parser(commands.verbs())
        cli.parse(["--scenario", "Offline", "--sut", "ort-int8"])
        heavy = ("torch", "tensorflow", "openvino", "onnxruntime", "onnx", "matplotlib",
                 "scipy", "sklearn", "skimage", "ray", "nncf")
        print(json.dumps([name for name in heavy if name in sys.modules]))
    """, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
