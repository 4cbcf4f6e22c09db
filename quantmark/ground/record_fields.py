"""Which JSON values a record's field accepts, read from its annotation: the check
``quantmark.ground.records`` makes of every field it loads, so a record of the wrong shape is
one line, not a crash later. Apart from the record kinds for the records module's size only.
"""

from __future__ import annotations

import types
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints


@cache
def hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def optional(hint: Any) -> bool:
    return type(None) in accepts(hint)


def accepts(hint: Any) -> tuple[type, ...]:
    """The Python types a JSON value of a field annotated ``hint`` may have."""
    if hint is Any:
        return (object,)
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return tuple(t for arg in get_args(hint) for t in accepts(arg))
    if hint is float:
        return (int, float)
    if hint is type(None):
        return (type(None),)
    return (origin or hint,)
