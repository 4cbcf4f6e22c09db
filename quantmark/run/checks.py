"""Cheap checks of a RunConfig in the parent, before a child process is started.

Each failure is one UserError line naming the problem and the fix. Nothing heavy is imported:
no framework, no LoadGen.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.ground.paths import path_problem, require_path

SAVED_MODEL_FILE = "saved_model.pb"  # models.saved_model's; importing it here costs seconds
#: a batch's float32 input is held a few times over (the batch, the SUT's copy, the
#: framework's): the memory a batch needs at the very least, as a multiple of its input
BATCH_MEMORY_FACTOR = 4
MEMINFO = Path("/proc/meminfo")
#: the tasks whose samples are images in the preprocessed cache (a text task's are tokens)
IMAGE_TASKS = ("classification", "detection")


def _output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or become) an output folder; None when it can."""
    if os.path.lexists(path):
        return path_problem(path, "folder")
    for parent in path.absolute().parents:
        if os.path.lexists(parent):
            problem = path_problem(parent, "folder")
            return None if problem is None else f"is not writable: {parent} {problem}"
    return None


def check_output_writable(output: str) -> None:
    """The output folder exists (or can be made) and takes files: a file there is named."""
    path = Path(output)
    problem = _output_problem(path)
    if problem is not None:
        raise UserError(f"--output {output} {problem}; pass --output to a folder (it is made "
                        "when missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".quantmark-probe-"):
            pass
    except OSError as exc:
        raise UserError(f"output folder {output} is not writable ({exc.strerror}); "
                        "pass --output to a folder you can write") from None


def check_dataset(path: str | None, labels: str | None = None) -> None:
    """A dataset folder in either layout, and its labels file: a val_map.txt folder is read
    later (50,000 lines); class folders are listed now, so an empty class or a folder name the
    labels file lacks is one line before minutes of work."""
    if labels is not None:
        from quantmark.qsl.label_space import read_class_names

        read_class_names(labels)
    if path is None:
        return
    folder = Path(path)
    problem = path_problem(folder, "folder")
    if problem is not None:
        raise UserError(f"dataset folder {path} {problem}; pass --dataset-path DIR "
                        "holding val_map.txt or one folder of images per class")
    if not (folder / "val_map.txt").is_file():
        from quantmark.qsl.imagenet import ImageFolderDataset

        ImageFolderDataset(folder, labels)


def validate_inputs(dataset_path: str | None, calibration_list: str | None,
                    user_conf: str | None, model: str = "") -> None:
    """The files a run reads: checked before minutes of work, not after."""
    from quantmark.models.zoo import MODEL_NAMES
    from quantmark.scenarios.userconf import parse_user_conf

    check_dataset(dataset_path)
    if calibration_list:
        require_path(calibration_list, "--calibration-list",
                     "pass a text file with one calibration image path a line")
    if user_conf:
        parse_user_conf(user_conf, tuple(dict.fromkeys([*MODEL_NAMES, model or MODEL_NAMES[0]])))


def check_model_path(model_path: str, model: str, sut: str) -> None:
    """A model file, or for the TensorFlow and TFLite SUTs a SavedModel directory."""
    from quantmark.sut.registry import FRAMEWORKS, get_sut

    framework = FRAMEWORKS.get(get_sut(sut).framework)  # its folder says (FrameworkInfo)
    takes_folders = bool(framework and framework.model_folders)
    problem = path_problem(model_path)
    if problem is None:
        return
    expected = "a model file"
    if takes_folders:
        expected += " or a TensorFlow SavedModel directory (with saved_model.pb)"
        if problem == "is a directory":
            if os.path.isfile(os.path.join(model_path, SAVED_MODEL_FILE)):
                return
            problem = f"is a directory without {SAVED_MODEL_FILE}, so not a SavedModel"
    elif problem == "is a directory":
        expected += " (a SavedModel directory is for the tf-* and tflite-* SUTs only)"
    raise UserError(f"--model-path {model_path} {problem} (model {model}, SUT {sut}); "
                    f"pass {expected}")


def dataset_size(dataset_path: str | None, builtin: str = "photos") -> int:
    """Images in the dataset: val_map.txt's lines, the class folders' images, or the built-in
    dataset's count (``builtin`` names which, as ``qsl.open_dataset`` takes it)."""
    if dataset_path is None:
        if builtin == "digits":
            from quantmark.qsl.digits_split import digits_dataset_root

            return dataset_size(str(digits_dataset_root()))
        from quantmark.qsl.builtin import EVAL_COUNT

        return EVAL_COUNT
    val_map = Path(dataset_path) / "val_map.txt"
    if not val_map.is_file():
        from quantmark.qsl.imagenet import ImageFolderDataset

        return len(ImageFolderDataset(dataset_path).all_items)
    with open(val_map, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable in bytes (Linux); None where the kernel does not say."""
    from quantmark.qsl.footprint import available_memory as read

    return read(meminfo)


def check_batch_fits(batch: int, model: Any, dataset_path: str | None,
                     meminfo: Path = MEMINFO, flag: str = "--batch-size",
                     images: int | None = None) -> None:
    """A batch the samples can fill and the memory can hold, known before a child allocates
    it (``--batch-size 100000`` once asked for 56 GiB). ``model``: a name or a resolved spec;
    ``images``: the opened dataset's count, where the run has opened it."""
    from quantmark.models.zoo import get_model

    spec = get_model(model) if isinstance(model, str) else model
    model = spec.name
    if images is None:
        images = dataset_size(dataset_path)
    limit = max(spec.performance_sample_count, images)
    if batch > limit:
        raise UserError(f"{flag} {batch} is more than the {images} images of the dataset "
                        f"and model {model}'s {spec.performance_sample_count} performance "
                        f"samples, so a batch would only repeat samples; pass {flag} "
                        f"{limit} or less")
    pixels = spec.channels * spec.input_size * spec.input_width
    needed = batch * pixels * 4 * BATCH_MEMORY_FACTOR
    available = available_memory(meminfo)
    if available is not None and needed > available:
        gib = 1024 ** 3
        raise UserError(f"{flag} {batch} needs at least {needed / gib:.1f} GiB for its "
                        f"{spec.input_size}x{spec.input_width} float32 inputs, more than the "
                        f"{available / gib:.1f} GiB of memory available; pass a smaller "
                        f"{flag}")


def check_batch(config: RunConfig) -> None:
    """The batch size makes sense for the scenario (checked before the files are)."""
    if config.batch_size < 1:
        raise UserError(f"--batch-size {config.batch_size}: must be 1 or more")
    if config.scenario == "SingleStream" and config.batch_size != 1:
        raise UserError(f"--batch-size {config.batch_size} with SingleStream: SingleStream "
                        "issues one sample per query, so it runs batch 1 only; drop "
                        "--batch-size or use Offline, MultiStream or Server")


def validate(config: RunConfig) -> None:
    """Raise UserError for the first problem found in ``config``."""
    from quantmark.scenarios.settings import validate_scenario
    from quantmark.sut.registry import check_options, require_available
    from quantmark.tasks.catalog import task_for

    validate_scenario(config.scenario)
    task = None
    if config.ensemble:
        validate_ensemble(config)
    else:
        check_options(require_available(config.sut), config.sut_options)
        task = task_for(config)
        spec = task.resolve_spec(config)
    if config.mode not in ("performance", "accuracy"):
        raise UserError(f"unknown mode '{config.mode}'; use performance or accuracy")
    check_batch(config)
    if config.threads < 0 or config.workers < 0:
        raise UserError("--threads must be >= 0 (0 = all cores) and --workers >= 0 "
                        "(0 = the SUT's preferred number)")
    if config.model_path and not config.ensemble:
        check_model_path(config.model_path, config.model, config.sut)
    # another task's dataset folder is its task's to read (COCO's layout is no class folder)
    image_folder = task is None or task.name == "classification"
    validate_inputs(config.dataset_path if image_folder else None, config.calibration_list,
                    config.user_conf, config.model)
    from quantmark.sut.ensemble.members import parse_members

    dataset = None if task is None else task.open_dataset(config, spec)  # fits the model
    for model in ({m.model for m in parse_members(config.ensemble)} if config.ensemble
                  else {spec}):
        check_batch_fits(config.batch_size, model, config.dataset_path,
                         images=None if dataset is None else len(dataset.all_items))
    if task is not None and task.name in IMAGE_TASKS:
        from quantmark.qsl.cache import check_set_fits

        check_set_fits(spec, dataset, available_memory(MEMINFO))  # its cache, its memory
    check_output_writable(config.output)


def validate_ensemble(config: RunConfig) -> None:
    """Every member runs here, every --sut-option is read by a member (or the ensemble), and
    the ensemble runs its members on the built-in models (no --model-path)."""
    from quantmark.sut.ensemble.build import check_options as check_ensemble_options
    from quantmark.sut.ensemble.members import check_mode, parse_members
    from quantmark.sut.registry import require_available

    check_mode(config.ensemble_mode, config.ensemble_combine)
    members = parse_members(config.ensemble)
    if config.model_path:
        raise UserError("--model-path names one model; an ensemble's members are built-in "
                        "models (--ensemble MODEL@SUT,...): drop --model-path")
    infos = []
    for member in members:
        try:
            infos.append(require_available(member.sut))
        except UserError as exc:
            raise UserError(f"--ensemble member {member.label}: {exc}") from None
    check_ensemble_options(config, infos)
