"""Loading a state_dict strictly into a built-in architecture: every way a file can fail to
fit (unreadable, not tensors, missing or extra keys, other shapes) is one line naming it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from quantmark.ground.errors import UserError

if TYPE_CHECKING:
    from torch import nn


def load_state_dict(model_name: str, model: nn.Module, path: Path) -> None:
    """Strictly load a state_dict file into ``model``; every failure is a one-line UserError."""
    import torch

    fix = "pass a torch state_dict saved with torch.save(model.state_dict(), path)"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle/zip errors come in many types
        cause = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserError(
            f"model {model_name}: cannot read weights {path} ({cause}); {fix}"
        ) from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"model {model_name}: {path} is not a state_dict of tensors; {fix}")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    bad_shape = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing keys (e.g. {missing[0]})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys (e.g. {unexpected[0]})")
    if bad_shape:
        k = bad_shape[0]
        problems.append(
            f"{len(bad_shape)} shape mismatches (e.g. {k}: file {tuple(state[k].shape)} "
            f"vs model {tuple(own[k].shape)})"
        )
    if problems:
        raise UserError(
            f"model {model_name}: weights {path.name} do not fit the architecture: "
            f"{'; '.join(problems)}; pass weights with torchvision-compatible names"
        )
    model.load_state_dict(state, strict=True)
