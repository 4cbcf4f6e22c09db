"""Text runs end to end as a user types them (``run.py``, a subprocess each), on a tiny random
BERT folder (model.onnx + tokenizer.json): the task is read from the model, a VALID
performance run proves ONNX Runtime's integer MatMuls, an accuracy run scores cosine and
retrieval agreement against the FP32 reference with intervals and MLPerf's 99% rule, a
classifier is scored on a ``text,label`` CSV, two runs pair sentence by sentence, and what
cannot run is one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from quantmark.tasks.text.definition import TASK
from tests.conftest import run_cli
from tests.tasks.text.tiny_encoder import tiny_encoder_folder, tiny_hf_classifier_folder

SEQ = "24"  # short sequences: the tests' time, not the metric's


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_encoder_folder(tmp_path_factory.mktemp("tinyenc") / "tinyenc")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 3-class tiny classifier and a labelled CSV of 66 real sentences."""
    from quantmark.tasks.text.corpus import builtin_sentences

    folder = tmp_path_factory.mktemp("tinycls")
    model = tiny_hf_classifier_folder(folder / "tinycls", labels=3, seed=1)
    table = folder / "labelled.csv"
    with table.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        for i, sentence in enumerate(builtin_sentences()[:66]):
            writer.writerow([sentence, ("alpha", "beta", "gamma")[i % 3]])
    return model, table


def _run(tmp: Path, *args: str) -> tuple[dict, Path]:
    out = tmp / "out"
    proc = run_cli("--scenario", "Offline", "--seq-len", SEQ, "--output", str(out), *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    [found] = out.rglob("results.json")
    return json.loads(found.read_text()), found.parent


def test_a_performance_run_is_valid_and_proves_integer_matmuls(encoder: Path,
                                                               tmp_path: Path) -> None:
    results, _ = _run(tmp_path, "--sut", "ort-int8dyn", "--model-path", str(encoder),
                      "--padding", "dynamic")
    assert results["task"]["name"] == "text" and results["task"]["head"] == "embedding"
    assert results["summary"]["validity"] == "VALID"
    kernels = results["sut"]["executed_kernels"]
    # ORT fuses the quantize and integer MatMul: its fused kernels, counted as integer
    assert kernels["DynamicQuantizeMatMul"]["int8"] + kernels["MatMulIntegerToFloat"]["int8"] > 0
    assert results["model"]["input"] == {"seq_len": 24, "padding": "dynamic", "dtype": "int64",
                                         "rows": ["input_ids", "attention_mask",
                                                  "token_type_ids"]}
    assert results["model"]["name"] == "tinyenc"


def test_accuracy_is_cosine_and_retrieval_against_fp32_with_intervals(encoder: Path,
                                                                       tmp_path: Path) -> None:
    base, base_dir = _run(tmp_path / "a", "--sut", "ort-fp32", "--model-path", str(encoder),
                          "--mode", "accuracy")
    got, got_dir = _run(tmp_path / "b", "--sut", "ort-int8", "--model-path", str(encoder),
                        "--mode", "accuracy")
    for results in (base, got):
        accuracy = results["accuracy"]
        low, high = accuracy["cosine_interval"]
        assert low <= accuracy["cosine"] <= high <= 100.0 + 1e-9
        assert 0.0 <= accuracy["retrieval_agreement"] <= 100.0
        assert accuracy["target"]["verdict"] in ("met", "not met", "not resolved")
        assert results["task"]["metric"]["key"] == "cosine"
    assert base["accuracy"]["cosine"] > 99.99  # FP32 against its own reference
    assert base["accuracy"]["retrieval_agreement"] == 100.0
    assert base["sut"]["executed_precision"] == "fp32"
    # a transformer's static INT8 quantizes its weighted MatMuls; attention's products stay FP32
    assert got["sut"]["executed_precision"] == "int8+fp32"
    assert got["sut"]["executed_kernels"]["QLinearMatMul"]["int8"] > 0
    text = (got_dir / "accuracy.txt").read_text()
    assert "cosine:" in text and "retrieval_agreement:" in text and "target:" in text
    change = TASK.paired_change(base_dir, got_dir)
    assert change is not None and change.n_samples == got["accuracy"]["sentences"]
    assert change.low <= change.delta_points <= change.high
    assert change.metric == "cosine to FP32"


@pytest.mark.parametrize("sut", ["ort-int8dyn", "ov-int8", "torch-int8dyn"])
def test_a_classifier_is_scored_on_a_text_label_csv(classifier: tuple[Path, Path],
                                                    tmp_path: Path, sut: str) -> None:
    """A user's Hugging Face classifier folder (ONNX export, checkpoint, tokenizer.json) and a
    labelled CSV through each framework's INT8 (torch runs the checkpoint beside the ONNX)."""
    model, table = classifier
    results, folder = _run(tmp_path, "--sut", sut, "--model-path", str(model),
                           "--dataset-path", str(table), "--mode", "accuracy")
    assert "int8" in results["sut"]["executed_precision"]
    accuracy = results["accuracy"]
    assert results["task"]["head"] == "classifier"
    assert results["task"]["metric"]["key"] == "accuracy"
    assert accuracy["sentences"] == 66 - 7  # every 10th text calibrates, held out
    assert 0.0 <= accuracy["accuracy"] <= 100.0 and "agreement" in accuracy
    assert results["dataset"]["held_out_for_calibration"] == 7
    assert "accuracy:" in (folder / "accuracy.txt").read_text()


@pytest.mark.parametrize(("extra", "message"), [
    (("--sut", "tflite-int8dyn", "--padding", "dynamic"), "--padding dynamic needs the "
                                                          "sequence length to vary"),
    (("--sut", "ort-fp32", "--input-size", "64"), "a text model takes tokens"),
    (("--sut", "ort-fp32", "--seq-len", "4"), "seq"),
])
def test_what_cannot_run_is_one_line(encoder: Path, tmp_path: Path, extra: tuple[str, ...],
                                     message: str) -> None:
    proc = run_cli("--scenario", "Offline", "--model-path", str(encoder), "--output",
                   str(tmp_path), *extra)
    assert proc.returncode != 0
    errors = [line for line in (proc.stdout + proc.stderr).splitlines()
              if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_classifier_without_labels_is_one_line(classifier: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    model, _ = classifier
    proc = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model-path", str(model),
                   "--output", str(tmp_path))
    assert proc.returncode != 0 and "give --dataset-path a text,label CSV" in proc.stdout + \
        proc.stderr
    assert "Traceback" not in proc.stderr
