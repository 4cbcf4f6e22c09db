"""Cheap checks of a RunConfig in the parent, before a child process is started.

Each failure is one UserError line naming the problem and the fix. Nothing heavy is imported:
no framework, no LoadGen.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from quantmark.config import RunConfig
from quantmark.errors import UserError


def check_output_writable(output: str) -> None:
    path = Path(output)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".quantmark-probe-"):
            pass
    except OSError as exc:
        raise UserError(f"output folder {output} is not writable ({exc.strerror}); "
                        "pass --output to a folder you can write") from None


def check_dataset(path: str | None) -> None:
    if path is None:
        return
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"dataset folder {path} does not exist; pass --dataset-path DIR "
                        "holding val_map.txt and the images")
    if not (folder / "val_map.txt").is_file():
        raise UserError(f"dataset folder {path} has no val_map.txt; it needs one line "
                        "'<relative image path> <label>' per image")


def validate_inputs(dataset_path: str | None, calibration_list: str | None,
                    user_conf: str | None) -> None:
    """The files a run reads: checked before minutes of work, not after."""
    from models.zoo import MODEL_NAMES
    from scenarios.userconf import parse_user_conf

    check_dataset(dataset_path)
    if calibration_list and not os.path.isfile(calibration_list):
        raise UserError(f"calibration list {calibration_list} does not exist")
    if user_conf:
        parse_user_conf(user_conf, tuple(MODEL_NAMES))


def validate(config: RunConfig) -> None:
    """Raise UserError for the first problem found in ``config``."""
    from models.zoo import get_model
    from scenarios.settings import validate_scenario
    from sut.registry import check_options, require_available

    validate_scenario(config.scenario)
    check_options(require_available(config.sut), config.sut_options)
    get_model(config.model)
    if config.mode not in ("performance", "accuracy"):
        raise UserError(f"unknown mode '{config.mode}'; use performance or accuracy")
    if config.batch_size < 1:
        raise UserError(f"--batch-size {config.batch_size}: must be 1 or more")
    if config.threads < 0 or config.workers < 0:
        raise UserError("--threads must be >= 0 (0 = all cores) and --workers >= 0 "
                        "(0 = the SUT's preferred number)")
    if config.model_path and not os.path.isfile(config.model_path):
        raise UserError(f"model file {config.model_path} does not exist (model {config.model}, "
                        f"SUT {config.sut}); pass --model-path to an existing file")
    validate_inputs(config.dataset_path, config.calibration_list, config.user_conf)
    check_output_writable(config.output)
