"""Every task quantmark knows, found the way framework folders are: each sub-package of
``quantmark.tasks`` with a ``definition`` module declaring ``TASK``, and every module named in the
``quantmark.tasks`` entry-point group of an installed distribution (a task living outside
quantmark). ``task_for`` picks a run's task: ``--task``, else the built-in model's owner, else
the one task whose ``claims`` accepts the model file."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.tasks.contract import Task

ENTRY_POINT_GROUP = "quantmark.tasks"
DEFAULT_TASK = "classification"
#: the module of a task folder that declares ``TASK`` (tasks/<task>/definition.py)
DEFINITION = "definition"


def _declared(module_name: str) -> Task:
    module = importlib.import_module(module_name)
    task = getattr(module, "TASK", None)
    if not isinstance(task, Task):
        raise TypeError(f"{module_name}.TASK is not a quantmark.tasks.contract.Task")
    return task


@functools.cache
def all_tasks() -> dict[str, Task]:
    """name -> task: the folders of quantmark.tasks first, then installed plugins."""
    package = importlib.import_module("quantmark.tasks")
    found: dict[str, Task] = {}
    for info in pkgutil.iter_modules(package.__path__, "quantmark.tasks."):
        module = f"{info.name}.{DEFINITION}"
        if info.ispkg and importlib.util.find_spec(module) is not None:
            task = _declared(module)
            found[task.name] = task
    for point in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                        key=lambda p: p.name):
        task = _declared(point.value)
        found.setdefault(task.name, task)
    return found


def get_task(name: str) -> Task:
    """The task called ``name``; one line listing the known ones otherwise."""
    tasks = all_tasks()
    if name not in tasks:
        raise UserError(f"unknown task {name!r}: choose one of {', '.join(sorted(tasks))}")
    return tasks[name]


def _owner(model: str) -> Task | None:
    return next((t for t in all_tasks().values() if model in t.models), None)


def _claimants(model_path: str) -> list[Task]:
    path = Path(model_path)
    if path.suffix != ".onnx" or not path.is_file():
        return []
    return [task for task in all_tasks().values() if task.claims(path)]


def task_for(config: Any) -> Task:
    """The run's task, bound to its model (``Task.for_config``): see ``_chosen``."""
    return _chosen(config).for_config(config)


def _chosen(config: Any) -> Task:
    """The run's task: ``config.task`` (checked against the model file where there is one),
    the owner of a built-in ``--model``, or the task the ``--model-path`` file's outputs
    belong to (classification where no task claims it: its reader says what is wrong)."""
    named = getattr(config, "task", "") or ""
    if named:
        get_task(named)  # an unknown name first, whatever the model
    if config.model_path:
        claimants = _claimants(config.model_path)
        if named:
            task = get_task(named)
            if claimants and task not in claimants:
                raise UserError(f"--task {named}: --model-path {config.model_path} is a "
                                f"{claimants[0].name} model by its outputs; drop --task or pass "
                                f"--task {claimants[0].name}")
            return task
        return claimants[0] if claimants else get_task(DEFAULT_TASK)
    owner = _owner(config.model)
    if named and owner is not None and owner.name != named:
        raise UserError(f"--task {named}: model {config.model} is a {owner.name} model; drop "
                        f"--task or pass --task {owner.name}")
    return get_task(named) if named else (owner or get_task(DEFAULT_TASK))


def builtin_models() -> tuple[str, ...]:
    """Every built-in model name any task owns (classification's zoo first)."""
    return tuple(dict.fromkeys(name for task in all_tasks().values() for name in task.models))
