"""Building an ensemble: each member's spec takes the run's input size and class count (as a
single model's does), and each member's input records the shape and type it is fed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from quantmark.ground.config import RunConfig
from quantmark.sut.ensemble import build
from quantmark.sut.ensemble.backend import MemberRun
from quantmark.sut.ensemble.members import Member
from quantmark.sut.interface import Backend
from quantmark.sut.registry import get_sut


class Nhwc(Backend):
    """A member that loads nothing and takes NHWC."""

    layout = "NHWC"
    artifact = None  # type: ignore[assignment]

    def load(self) -> None:
        pass

    def predict(self, batch: np.ndarray) -> np.ndarray:
        return np.zeros((len(batch), 37), np.float32)

    def describe(self) -> dict[str, Any]:
        return {}


def test_members_take_the_run_s_size_and_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    import quantmark.qsl.calibration_sets as calibration_sets
    import quantmark.qsl.library as library
    import quantmark.sut.ensemble.inputs as inputs
    import quantmark.sut.registry as registry

    specs: dict[str, Any] = {}

    def factory(name: str, options: Any, spec: Any, calibration: Any) -> Backend:
        specs[name] = spec
        return Nhwc()

    monkeypatch.setattr(registry, "load_factory", lambda info: factory)
    monkeypatch.setattr(calibration_sets, "CalibrationProvider", lambda *args: None)
    monkeypatch.setattr(library.QuerySampleLibrary, "from_dataset",
                        classmethod(lambda cls, dataset, recipe, *a, **k: recipe))
    monkeypatch.setattr(inputs, "EnsembleSamples", lambda libraries: libraries)
    config = RunConfig(scenario="Offline", sut="ensemble", model="resnet50",
                       input_size="128x96", num_classes=37)
    member = Member("mobilenetv2", "ort-fp32")
    backend, spec, _ = build._load_member(config, member, get_sut("ort-fp32"), 0, None, {})
    assert (spec.name, spec.input_size, spec.input_width, spec.num_classes) == \
        ("mobilenetv2", 128, 96, 37)
    run = MemberRun(member, backend, 0, 0)
    recipes = build._inputs([run], [spec], dataset=None)
    assert recipes[0].input_shape() == (128, 96, 3)
    assert run.input["shape"] == [128, 96, 3] and run.input["dtype"] == "float32"
