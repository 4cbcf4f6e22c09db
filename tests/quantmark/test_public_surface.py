"""The public surface is listed once (``quantmark.__all__``) and CHANGELOG.md names the same:
a name that changes without a changelog line fails here."""

from __future__ import annotations

import re

import quantmark
from tests.conftest import ROOT


def _changelog_names() -> set[str]:
    text = (ROOT / "CHANGELOG.md").read_text()
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    listed = [line for line in section.splitlines() if line.startswith(("- ", "  "))]
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", "\n".join(listed))) - {"quantmark"}


def test_the_changelog_lists_the_public_names() -> None:
    assert _changelog_names() == set(quantmark.__all__)


def test_every_public_name_resolves_with_hints() -> None:
    import inspect

    for name in quantmark.__all__:
        found = getattr(quantmark, name)
        if inspect.isfunction(found):
            hints = inspect.get_annotations(found)
            assert "return" in hints, name
            assert found.__doc__, name


def test_import_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, quantmark; heavy = [m for m in ('quantmark.api.public', 'scipy', "
            "'pandas', 'rich') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_every_call_stays_a_call_after_its_namesake_package_is_imported() -> None:
    """``quantmark.run``, ``.sweep`` and ``.recommend`` are also subpackages; Python binds an
    imported subpackage to its name, which once turned ``qm.run`` into a module on its second
    call. Each call, after importing whatever package shares its name, still reaches its
    API function (its argument check answers)."""
    import importlib
    import importlib.util

    import pytest

    for name in quantmark._CALLS:  # noqa: SLF001 - the list __all__ is made from
        if importlib.util.find_spec(f"quantmark.{name}") is not None:
            importlib.import_module(f"quantmark.{name}")
        call = getattr(quantmark, name)
        assert callable(call), name
        if name == "compare":  # its own signature: folders that are not there
            with pytest.raises(quantmark.UserError, match="no-such-folder"):
                call("/no-such-folder-a", "/no-such-folder-b")
            continue
        with pytest.raises(quantmark.UserError, match=rf"quantmark\.{name}\(\) got unknown"):
            call(no_such_flag=1)
