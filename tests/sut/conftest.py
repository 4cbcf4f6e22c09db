"""Shared SUT fixtures: a private artifact cache and the digits model every framework runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.digits_model import (
    CALIBRATION_COUNT,
    ArrayCalibration,
    DigitsData,
    load_digits_data,
    train_digits_model,
)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """SUT tests never read or write the user's cache."""
    root = tmp_path_factory.mktemp("quantmark-sut-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUANTMARK_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def digits_data() -> DigitsData:
    return load_digits_data()


@pytest.fixture(scope="session")
def digits_weights(tmp_path_factory: pytest.TempPathFactory, digits_data: DigitsData) -> Path:
    """A state_dict of the digits CNN, trained once per session (seconds)."""
    return train_digits_model(tmp_path_factory.mktemp("digits") / "digits-cnn.pt", digits_data)


@pytest.fixture(scope="session")
def digits_calibration(digits_data: DigitsData) -> ArrayCalibration:
    return ArrayCalibration(digits_data.train_x[:CALIBRATION_COUNT])
