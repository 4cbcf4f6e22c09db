"""The report's Profile section, from a profile folder written as ``run.py profile`` writes it
(its record built by ``profile_run.record`` from profiles of three SUTs, one of them a
framework without a profiler): found under the folders, rendered in Markdown, HTML and the
console, its figure carried into the report."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quantmark.commands.profile import write
from quantmark.diagnosis.layer_times import GraphNode
from quantmark.diagnosis.profile_run import ProfileConfig, record
from quantmark.report import profile_section
from quantmark.sut.profiling import LayerTime, Profile
from tests.conftest import run_cli

GRAPH = [GraphNode("conv1", "Conv", ("conv1", "relu1")), GraphNode("conv2", "Conv", ("conv2",)),
         GraphNode("fc", "Gemm", ("fc",))]


def _profile(sut: str, rows: list[tuple[str, str, float, str, str]], end: float) -> Profile:
    return Profile(sut=sut, framework=sut.split("-")[0], batch_size=1, iterations=9,
                   layers=[LayerTime(name, op, "k", precision, category, ms)
                           for name, op, ms, precision, category in rows],
                   end_to_end_ms=end, method="synthetic", notes={})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A profile of ort-int8 against ort-fp32, trivial-fp32 (no profiler) and ov-int8."""
    test = _profile("ort-int8", [("q", "QuantizeLinear", 0.1, "int8", "overhead"),
                                 ("conv1_token_1", "QLinearConv", 0.5, "int8", "compute"),
                                 ("conv2_token_4", "QLinearConv", 2.5, "int8", "compute"),
                                 ("fc", "QGemm", 0.2, "int8", "compute")], 3.5)
    fp32 = _profile("ort-fp32", [("relu1_nchwc", "Conv", 1.0, "fp32", "compute"),
                                 ("conv2_nchwc", "Conv", 1.5, "fp32", "compute"),
                                 ("fused fc", "FusedGemm", 0.3, "fp32", "compute")], 2.9)
    ov = _profile("ov-int8", [("conv1/WithoutBiases", "Convolution", 0.4, "int8", "compute"),
                              ("conv2/WithoutBiases", "Convolution", 0.9, "int8", "compute"),
                              ("fc/x", "FullyConnected", 0.1, "int8", "compute")], 1.5)
    config = ProfileConfig(model="m", sut="ort-int8", against="ort-fp32,trivial-fp32,ov-int8",
                           iterations=9, warmup=2, output=str(tmp_path))
    found = record(config, "m", {"ort-int8": (test, None), "ort-fp32": (fp32, None),
                                 "trivial-fp32": (None, "trivial has no profiler"),
                                 "ov-int8": (ov, None)}, GRAPH, "/models/m.onnx")
    return write(found, config, time.time())


def test_a_profile_folder_is_found_and_rendered(folder: Path) -> None:
    (loaded,) = profile_section.load([folder.parents[2]])
    assert loaded.sut == "ort-int8" and loaded.references == ["ort-fp32", "trivial-fp32",
                                                              "ov-int8"]
    text = "\n".join(profile_section.markdown(loaded))
    assert "## Profile: m: ort-int8 against ort-fp32, trivial-fp32, ov-int8" in text
    assert "named by the canonical ONNX model /models/m.onnx" in text
    # the slower layers, ranked by ms lost, named by the ONNX layer: conv2 alone
    slower = text.split("### where ort-int8 is slower")[1].split("###")[0]
    assert "| conv2 | conv2_token_4 |" in slower and "+1.000" in slower and "1.67x" in slower
    assert "| fc |" not in slower and "| conv1 |" not in slower
    # every SUT side by side, the one without a profiler left out in one line
    assert "| ONNX layer | ort-int8 ms | ort-fp32 ms | ov-int8 ms | x ort-fp32 |" in text
    assert "| conv1 | 0.600 int8 | 1.000 fp32 | 0.400 int8 | 0.60x |" in text
    assert "- trivial-fp32: not profiled: trivial has no profiler" in text
    assert "- ov-int8: INT8 compute 100%" in text and "layers sum to" in text
    page = profile_section.to_html(loaded)
    assert "<h2>Profile: m: ort-int8" in page and "<td>conv2_token_4</td>" in page
    (figure,) = profile_section.figures([loaded])
    assert figure.png == (folder / "profile.png").read_bytes()
    assert figure.filename == "profile-m-ort-int8-vs-ort-fp32+trivial-fp32+ov-int8.png"


def test_run_report_shows_profiles_in_the_console_and_the_report_files(folder: Path,
                                                                      tmp_path: Path) -> None:
    proc = run_cli("report", str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Profile: m: ort-int8 against" in proc.stdout
    assert "where ort-int8 is slower" in proc.stdout and "every SUT by ONNX layer" in proc.stdout
    out = tmp_path / "report"
    proc = run_cli("report", str(folder), "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    markdown = (out / "report.md").read_text()
    assert "## Profile: m: ort-int8" in markdown and "## Batch-size scan" not in markdown
    assert "figures/profile-m-ort-int8-vs-ort-fp32+trivial-fp32+ov-int8.png" in markdown
    assert "<h2>Profile: m: ort-int8" in (out / "report.html").read_text()
    assert (out / "figures" / "profile-m-ort-int8-vs-ort-fp32+trivial-fp32+ov-int8.png"
            ).is_file()
