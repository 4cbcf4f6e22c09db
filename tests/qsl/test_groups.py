"""val_groups.txt: which source photo each evaluation image was cut from."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.qsl.groups import VAL_GROUPS, read_groups


def test_absent_file_is_none(tmp_path: Path) -> None:
    assert read_groups(tmp_path) is None


def test_reads_path_to_group(tmp_path: Path) -> None:
    (tmp_path / VAL_GROUPS).write_text(
        "val/a.jpg coffee\n\nval/my photo.jpg  motorcycle_left \nval/c.jpg coffee\n")
    assert read_groups(str(tmp_path)) == {"val/a.jpg": "coffee",
                                          "val/my photo.jpg": "motorcycle_left",
                                          "val/c.jpg": "coffee"}


@pytest.mark.parametrize("text, words", [
    ("val/a.jpg coffee\nval/b.jpg\n", ":2: malformed line 'val/b.jpg'"),
    ("val/a.jpg coffee\nval/a.jpg chelsea\n", ":2: 'val/a.jpg' is listed again (first at line 1)"),
    ("\n\n", "lists no images"),
])
def test_malformed_file_is_one_line_user_error(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / VAL_GROUPS).write_text(text)
    with pytest.raises(UserError) as err:
        read_groups(tmp_path)
    message = str(err.value)
    assert str(tmp_path / VAL_GROUPS) in message and words in message and "\n" not in message


def test_not_utf8_is_user_error(tmp_path: Path) -> None:
    (tmp_path / VAL_GROUPS).write_bytes(b"val/a.jpg caf\xe9\n")
    with pytest.raises(UserError, match="not UTF-8"):
        read_groups(tmp_path)
