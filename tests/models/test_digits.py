"""The digits CNN that quantmark trains itself: accurate on the held-out half, trained once and
deterministically, cached under its recipe's hash and never trusted when its file changed."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from quantmark.ground.errors import UserError
from quantmark.models import digits_cnn
from quantmark.models.digits_cnn import held_out_top1, model_inputs, trained_file
from quantmark.models.zoo import (
    build_torch_model,
    get_model,
    weights_description,
    weights_identity,
)
from quantmark.qsl.digits_split import digits_dataset_root, load_split
from quantmark.qsl.preprocess import decode_and_crop, normalise, recipe_for
from tests.conftest import run_python

SPEC = get_model("digits-cnn")


@pytest.fixture(scope="module")
def trained() -> torch.nn.Module:
    """The zoo's digits-cnn, trained (once per session cache) and loaded from its file."""
    return build_torch_model(SPEC)[0]


def test_spec_matches_the_split() -> None:
    split = load_split()
    assert (SPEC.channels, SPEC.input_size, SPEC.input_width, SPEC.num_classes) == (1, 8, 8, 10)
    assert SPEC.builtin_dataset == "digits" and SPEC.resize_rule == "stretch"
    assert SPEC.performance_sample_count == len(split.held_y)
    # the normalisation is the train half's own pixel statistics
    assert abs(SPEC.mean[0] - split.train_x.mean()) < 0.5
    assert abs(SPEC.std[0] - split.train_x.std()) < 0.5


def test_trains_to_well_over_90_percent_on_the_held_out_half(trained: torch.nn.Module) -> None:
    assert held_out_top1(trained, SPEC) >= 95.0


def test_training_is_deterministic(trained: torch.nn.Module) -> None:
    threads = torch.get_num_threads()
    state = torch.get_rng_state()
    again = digits_cnn.train(SPEC).state_dict()
    assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), state)
    for name, tensor in trained.state_dict().items():
        assert torch.equal(tensor, again[name]), name


def test_cached_weights_are_reused(trained: torch.nn.Module,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = trained_file(SPEC)

    def fail(_spec: object) -> None:
        raise AssertionError("retrained although the cached weights are intact")

    monkeypatch.setattr(digits_cnn, "train", fail)
    assert trained_file(SPEC) == path
    model, description = build_torch_model(SPEC)
    for name, tensor in trained.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    assert description.startswith("trained by quantmark on scikit-learn digits train split "
                                  "(898 samples), seed 0")


def _tamper_weights(seal: Path) -> None:
    path = seal.with_name(json.loads(seal.read_text())["file"])
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


def _delete_weights(seal: Path) -> None:
    seal.with_name(json.loads(seal.read_text())["file"]).unlink()


def _edit_seal(seal: Path) -> None:
    seal.write_text(seal.read_text()[:-5])


@pytest.mark.parametrize("damage", [_tamper_weights, _delete_weights, _edit_seal])
def test_changed_weights_are_retrained_with_a_warning(
        damage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path))
    calls = []

    def quick(spec) -> torch.nn.Module:  # the real training is tested above; this counts
        calls.append(spec.name)
        torch.manual_seed(len(calls))
        return digits_cnn.digits_cnn(spec.num_classes).eval()

    monkeypatch.setattr(digits_cnn, "train", quick)
    first = trained_file(SPEC)
    damage(first.with_name(f"{first.name.rsplit('-', 1)[0]}.json"))
    with caplog.at_level(logging.WARNING, logger="quantmark.models.digits_cnn"):
        second = trained_file(SPEC)
    assert calls == ["digits-cnn", "digits-cnn"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed verification" in warnings[0]
    assert second.is_file() and trained_file(SPEC) == second  # the new file verifies
    assert len(calls) == 2
    model, _ = build_torch_model(SPEC)
    assert torch.equal(model.state_dict()["0.weight"],
                       torch.load(second, weights_only=True)["0.weight"])


def test_identity_is_the_recipe_and_changes_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    identity = weights_identity(SPEC)
    assert identity["kind"] == "trained" and identity == weights_identity(SPEC)
    monkeypatch.setitem(digits_cnn.RECIPE, "epochs", digits_cnn.RECIPE["epochs"] + 1)
    longer = weights_identity(SPEC)
    monkeypatch.undo()
    other_norm = weights_identity(dataclasses.replace(SPEC, mean=(70.0,)))
    monkeypatch.setattr("quantmark.qsl.digits_split.SPLIT_SEED", 1)
    other_split = weights_identity(SPEC)
    assert len({str(i) for i in (identity, longer, other_norm, other_split)}) == 4
    assert "seed 0" in weights_description(SPEC)


def test_identity_needs_neither_torch_nor_scikit_learn() -> None:
    code = ("import sys; from quantmark.models.zoo import get_model, weights_identity\n"
            "weights_identity(get_model('digits-cnn'))\n"
            "assert not {'torch', 'sklearn'} & set(sys.modules), 'imported'")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_another_shape_is_one_line() -> None:
    wider = dataclasses.replace(SPEC, input_size=16, input_width=16)
    with pytest.raises(UserError) as err:
        weights_identity(wider)
    assert "\n" not in str(err.value) and "--input-size" in str(err.value)


def test_training_inputs_are_what_the_qsl_makes_of_the_pngs() -> None:
    root = digits_dataset_root()
    split = load_split()
    recipe = recipe_for(SPEC, "NCHW")
    paths = sorted(p for p in root.rglob("*.png") if ".calibration" not in p.parts)[::97]
    rows = {int(i): n for n, i in enumerate(split.held_index)}
    decoded = normalise(np.stack([decode_and_crop(p, recipe) for p in paths]), recipe)
    expected = model_inputs(SPEC, split.held_x[[rows[int(p.stem)] for p in paths]]).numpy()
    assert decoded.shape == (len(paths), 1, 8, 8)
    assert np.array_equal(decoded, expected)
