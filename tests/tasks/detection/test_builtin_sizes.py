"""The built-in detector at any square size that is a multiple of 16 (its anchors are rebuilt
for the size, not saved, so the weights trained at 96 px load into it), and the trainer
interface the zoo calls for it.

The quick tier never trains (untrained modules, and what is computed without torch); what needs
the trained weights is slow (training takes 1-2 minutes of one core; ``QUANTMARK_TEST_CACHE``
keeps them between runs)."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.models.zoo import ModelSpec, build_torch_model, weights_identity
from quantmark.tasks.detection.digits_detect import canvases, detector

SIZES = (128, 160)


def _anchors(size: int) -> int:
    return (size // 8) ** 2 + (size // 16) ** 2


def _spec(size: int = detector.INPUT_SIZE) -> ModelSpec:
    """The built-in's spec as the detection task states it, without reading its file."""
    return ModelSpec(name=detector.MODEL_NAME, mean=(0.0,) * 3, std=(255.0,) * 3,
                     builder=detector.sized_builder(size), input_size=size, resize_short=size,
                     num_classes=10, resize_rule="letterbox", task="detection", head="raw",
                     trainer=detector.__name__)


@pytest.mark.parametrize("size", SIZES)
def test_module_at_size(size: int) -> None:
    """[N, 14, A] with A = (s/8)^2 + (s/16)^2, boxes inside the reach of their anchors."""
    import torch

    torch.manual_seed(0)
    model = detector.sized_builder(size)(detector.NUM_CLASSES).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, size, size))
    assert out.shape == (2, 4 + detector.NUM_CLASSES, _anchors(size))
    assert (out[:, 2:4] > 0).all() and (out[:, 2:4] <= 2 * detector.REACH * 16).all()
    assert ((out[:, 4:] >= 0) & (out[:, 4:] <= 1)).all()


def test_state_dict_holds_no_anchors() -> None:
    """The anchors are non-persistent: a 96 px state_dict loads strictly at 128 px, and the
    two modules agree on what they share (the backbone's maps)."""
    import torch

    torch.manual_seed(0)
    small = detector.build_module().eval()
    large = detector.build_module(size=128).eval()
    assert not any("points" in key or "reach" in key for key in small.state_dict())
    large.load_state_dict(small.state_dict())  # strict
    x = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        for got, want in zip(large.maps(x), small.maps(x), strict=True):
            torch.testing.assert_close(got, want)


def test_untrained_onnx_at_128_matches_the_module() -> None:
    """The export at 128 px states [N, 14, 320] and computes what the module computes."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import torch

    torch.manual_seed(1)
    model = detector.build_module(size=128).eval()
    data = detector.export_bytes(model)
    dims = [d.dim_value or d.dim_param
            for d in onnx.load_from_string(data).graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 14, _anchors(128)]
    x = np.random.default_rng(0).random((2, 3, 128, 128), dtype=np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = ort.InferenceSession(data).run(None, {"images": x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-3)


@pytest.mark.parametrize("size, nearest", [(100, "96 or 112"), (8, "16"), (250, "240 or 256")])
def test_other_sizes_are_refused_in_one_line(size: int, nearest: str) -> None:
    """Refused before anything trains, naming the nearest valid sizes, wherever it is given."""
    calls = (detector.check_size, detector.sized_builder, detector.builtin_detector_onnx,
             lambda s: detector.build_module(size=s))
    for call in calls:
        with pytest.raises(UserError) as caught:
            call(size)
        message = str(caught.value)
        assert "\n" not in message and f"not {size}" in message and nearest in message


def test_task_refuses_a_size_before_training() -> None:
    """``--input-size 100`` for the built-in is refused by the task, in one line."""
    from quantmark.tasks.catalog import get_task

    config = RunConfig(scenario="Offline", sut="ort-fp32", model=detector.MODEL_NAME,
                       input_size="100")
    with pytest.raises(UserError, match="multiple of 16 px, not 100: use 96 or 112"):
        get_task("detection").model_file(config)


def test_trainer_interface_without_training() -> None:
    """Identity and description come from the recipe alone: the same for every size, the
    no-argument call kept, another class count refused in one line."""
    identity = detector.trained_identity()
    assert identity == detector.trained_identity(_spec()) == detector.trained_identity(_spec(160))
    assert identity == weights_identity(_spec(128))
    assert identity == {"kind": "trained", "recipe": detector.recipe_hash(), "seed": 0}
    text = detector.trained_description(_spec(128))
    assert text.startswith("trained by quantmark on the built-in digit canvases")
    assert detector.recipe_hash() in text and "run at 128 px" in text
    assert f"{canvases.EVAL_IMAGES} held-out canvases" in text
    with pytest.raises(UserError, match="trained by quantmark for 10 classes") as caught:
        detector.trained_identity(replace(_spec(), num_classes=3))
    assert "\n" not in str(caught.value)


# ----------------------------------------------------------------------------- trained
@pytest.mark.slow
def test_trained_onnx_at_128(caplog: pytest.LogCaptureFixture) -> None:
    """The trained weights exported at 128 px: the module's outputs, cached and verified by
    sha256 (a changed file is exported again, with one warning), beside the 96 px file."""
    ort = pytest.importorskip("onnxruntime")
    import torch

    path = detector.builtin_detector_onnx(128)
    assert path != detector.builtin_detector_onnx() and "128px" in path.name
    x = np.random.default_rng(2).random((2, 3, 128, 128), dtype=np.float32)
    with torch.no_grad():
        expected = detector.builtin_detector_module(128)(torch.from_numpy(x)).numpy()
    got = ort.InferenceSession(str(path)).run(None, {"images": x})[0]
    assert got.shape == (2, 14, _anchors(128))
    np.testing.assert_allclose(got, expected, atol=1e-3)
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with caplog.at_level(logging.WARNING):
        again = detector.builtin_detector_onnx(128)
    assert "differs from what was trained" in caplog.text
    assert again.read_bytes() == good


@pytest.mark.slow
def test_zoo_builds_the_trained_detector_at_any_size() -> None:
    """``build_torch_model`` on a trainer spec: the verified state_dict in the sized
    architecture, described as quantmark's training."""
    import torch

    assert detector.trained_file(_spec(160)) == detector.trained_file()
    model, weights = build_torch_model(_spec(160))
    assert weights == detector.trained_description(_spec(160))
    reference = detector.builtin_detector_module(160)
    x = torch.rand(1, 3, 160, 160)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))
        assert model(x).shape == (1, 14, _anchors(160))

