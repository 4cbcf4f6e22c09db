"""A ``sut.layers.Recipe`` applied to torch's FX static INT8 flow (``quantize``).

* exclude: ``QConfigMapping.set_module_name(name, None)``: torch's own way to leave a module
  (and a fusion rooted at it) unquantized; convert_fx then puts dequantize/quantize around it.
* damage: after ``convert_fx``, the module's int8 weight is requantized with its scales
  multiplied by ``factor`` (``torch.quantize_per_channel`` of the dequantized weight) and set
  back with ``set_weight_bias``: the same values on a grid ``factor`` times too coarse.

Layer names are FX module qualified names; a module called more than once in the graph gets
``name:K`` for its K-th later call (diagnose), and the recipe acts on the module ``name``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from quantmark.ground.errors import UserError
from quantmark.sut.layers import Recipe

if TYPE_CHECKING:
    from torch.ao.quantization import QConfigMapping

OCCURRENCE = ":"
EXCLUSION = "qconfig None for the module (torch.ao.quantization QConfigMapping.set_module_name)"
DAMAGE = ("after convert_fx, the module's int8 weight requantized with scales x factor "
          "(torch.quantize_per_channel of the dequantized weight, set_weight_bias)")


def module_name(layer: str) -> str:
    """The module a layer name refers to (``name:K``, a later call of a module, -> ``name``)."""
    return layer.split(OCCURRENCE, 1)[0]


def check_names(model: nn.Module, recipe: Recipe) -> None:
    """Refuse names that are no module of ``model``: set_module_name would ignore them."""
    known = dict(model.named_modules())
    names = [*recipe.exclude, *(name for name, _ in recipe.damage)]
    unknown = sorted({n for n in names if not module_name(n) or module_name(n) not in known})
    if unknown:
        raise UserError(f"recipe names no module of the model: {', '.join(unknown)} "
                        "(use layer names from a torch-int8 capture)")


def qconfig_mapping(engine: str, recipe: Recipe) -> QConfigMapping:
    """The default mapping for ``engine`` with each excluded module's qconfig set to None."""
    from torch.ao.quantization import get_default_qconfig_mapping

    mapping = get_default_qconfig_mapping(engine)
    for name in sorted({module_name(n) for n in recipe.exclude}):
        mapping = mapping.set_module_name(name, None)
    return mapping


def _widened(weight: torch.Tensor, factor: float) -> torch.Tensor:
    """``weight`` (a quantized tensor) requantized with every scale times ``factor``."""
    values = weight.dequantize()
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        return torch.quantize_per_channel(values, weight.q_per_channel_scales() * factor,
                                          weight.q_per_channel_zero_points(),
                                          weight.q_per_channel_axis(), weight.dtype)
    return torch.quantize_per_tensor(values, weight.q_scale() * factor, weight.q_zero_point(),
                                     weight.dtype)


def damage_weights(quantized: nn.Module, recipe: Recipe) -> dict[str, float]:
    """Apply ``recipe.damage`` to the converted model in place; {module: factor} applied."""
    applied: dict[str, float] = {}
    for layer, factor in recipe.damage:
        name = module_name(layer)
        module = quantized.get_submodule(name)
        weight_fn = getattr(module, "weight", None)
        weight = weight_fn() if callable(weight_fn) else None
        if not isinstance(weight, torch.Tensor) or not weight.is_quantized \
                or not hasattr(module, "set_weight_bias"):
            raise UserError(f"cannot damage {name} ({type(module).__name__}): only quantized "
                            "conv/linear modules have int8 weights")
        module.set_weight_bias(_widened(weight, float(factor)), module.bias())
        applied[name] = float(factor)
    return applied
