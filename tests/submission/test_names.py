"""Names that become folders of the submission tree stay one folder inside --output."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.submission.package import package
from tests.conftest import run_cli


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("submitter", ["../../x", "..", "a/b", ".hidden", ""])
def test_submitter_that_leaves_the_output_is_refused(tmp_path, submitter):
    """<output>/<division>/<submitter>: '../../x' once wrote beside --output."""
    results = tmp_path / "results"
    results.mkdir()
    before = _tree(tmp_path)
    proc = run_cli("submission", "--results", str(results), "--submitter", submitter,
                   "--division", "open", "--output", str(tmp_path / "deep" / "sub"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"--submitter {submitter!r}" in proc.stderr
    assert "folder name" in proc.stderr
    assert _tree(tmp_path) == before  # nothing written, inside --output or out of it


def test_system_folder_with_a_control_character_is_refused(tmp_path):
    run = tmp_path / "results" / "box\nname" / "resnet50" / "Offline" / "performance" / "run_1"
    run.mkdir(parents=True)
    (run / "mlperf_log_detail.txt").write_text("")
    with pytest.raises(UserError) as caught:
        package(tmp_path / "results", submitter="Acme", division="open",
                output=tmp_path / "sub", require_official=False)
    message = str(caught.value)
    assert "system name" in message and "'box\\nname'" in message, message
    assert "control character" in message and "\n" not in message
    assert not (tmp_path / "sub").exists()


def test_output_and_results_are_named_as_what_they_are(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    with pytest.raises(UserError, match=f"--output {existing} is a file"):
        package(results, submitter="Acme", division="open", output=existing)
    with pytest.raises(UserError, match=f"results folder {existing} is a file"):
        package(existing, submitter="Acme", division="open", output=tmp_path / "sub")
    assert existing.read_text() == "mine"
