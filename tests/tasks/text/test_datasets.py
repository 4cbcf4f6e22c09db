"""A user's text set from CSV or JSONL: texts, labels (names mapped in sorted order, integers
kept), the file's sha256, and every refusal as one line naming the file and the fix."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.tasks.text.datasets import TextDataset, read_text_dataset


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- reading
def test_csv_with_string_labels(tmp_path: Path) -> None:
    path = _write(tmp_path, "reviews.csv",
                  'id,text,label\n1,"Great, really great.",pos\n2,"A ""quoted"" line\n'
                  'over two lines",neg\n\n3,Fine.,neutral\n4,Café au lait.,pos\n')
    dataset = read_text_dataset(path)
    assert dataset.texts == ("Great, really great.", 'A "quoted" line\nover two lines', "Fine.",
                             "Café au lait.")
    assert dataset.label_names == ("neg", "neutral", "pos")
    assert dataset.labels.dtype == np.int64 and dataset.labels.tolist() == [2, 0, 1, 2]
    assert dataset.source == path and len(dataset) == 4
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "4 texts from reviews.csv" in dataset.description and "3 classes" in dataset.description


def test_csv_integer_labels_are_kept_as_given(tmp_path: Path) -> None:
    dataset = read_text_dataset(_write(tmp_path, "a.csv", "label,text\n3,one\n0,two\n17,three\n"))
    assert dataset.labels.tolist() == [3, 0, 17] and dataset.label_names == ()


@pytest.mark.parametrize("content", ["text\nfirst\nsecond\n", "text,label\nfirst,\nsecond,\n"])
def test_csv_without_labels(tmp_path: Path, content: str) -> None:
    dataset = read_text_dataset(_write(tmp_path, "a.csv", content))
    assert dataset.texts == ("first", "second") and dataset.labels is None
    assert "unlabelled" in dataset.description


def test_a_csv_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    dataset = read_text_dataset(_write(tmp_path, "a.csv", "\ufefftext\nhello\n".encode()))
    assert dataset.texts == ("hello",)


def test_jsonl_labels_and_blank_lines(tmp_path: Path) -> None:
    named = read_text_dataset(_write(tmp_path, "a.jsonl", '{"text": "b", "label": "zebra"}\n\n'
                                     '{"text": "a", "label": "ant", "extra": 1}\n'))
    assert named.texts == ("b", "a") and named.labels.tolist() == [1, 0]
    assert named.label_names == ("ant", "zebra")
    numbered = read_text_dataset(_write(tmp_path, "b.jsonl", '{"text": "x", "label": 5}\n'
                                        '{"text": "y", "label": 2}'))
    assert numbered.labels.tolist() == [5, 2] and numbered.label_names == ()
    plain = read_text_dataset(_write(tmp_path, "c.jsonl", '{"text": "x"}\n{"text": "y", '
                                     '"label": null}\n'))
    assert plain.labels is None and plain.texts == ("x", "y")


def test_the_dataset_is_frozen(tmp_path: Path) -> None:
    dataset = read_text_dataset(_write(tmp_path, "a.csv", "text\nhello\n"))
    assert isinstance(dataset, TextDataset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        dataset.texts = ()  # type: ignore[misc]


# ----------------------------------------------------------------------------- refusals
REFUSALS = {  # name: (file name, content or None for no file, what the message says)
    "missing file": ("absent.csv", None, "does not exist"),
    "unknown suffix": ("texts.txt", "text\nhello\n", "unknown suffix '.txt'"),
    "no text column": ("a.csv", "sentence,label\nhello,1\n", "no 'text' column"),
    "empty file": ("a.csv", "", "is empty"),
    "blank file": ("a.jsonl", "\n \n", "is empty"),
    "header only": ("a.csv", "text,label\n", "holds no rows"),
    "empty csv text": ("a.csv", "text,label\nfine,1\n  ,2\n", "empty text on line 3"),
    "empty jsonl text": ("a.jsonl", '{"text": "ok"}\n\n{"text": ""}\n', "empty text on line 3"),
    "mixed csv labels": ("a.csv", "text,label\na,x\nb,\nc,y\n", "line 3 has no label"),
    "mixed jsonl labels": ("a.jsonl", '{"text": "a"}\n{"text": "b", "label": 1}\n',
                           "mixes labelled and unlabelled rows (line 1 has no label"),
    "not utf-8": ("a.csv", b"text\ncaf\xe9\n", "is not UTF-8 (byte 8, line 2)"),
    "bad json": ("a.jsonl", '{"text": "a"}\n{"text": \n', "line 2 is not JSON"),
    "jsonl without text": ("a.jsonl", '{"sentence": "a"}\n', "line 1 has no 'text' field"),
    "jsonl not an object": ("a.jsonl", '["a"]\n', "line 1 is not an object"),
    "jsonl text not a string": ("a.jsonl", '{"text": 3}\n', "'text' is a int"),
    "numbers and names": ("a.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": 2}\n',
                          "mixes number and string labels (line 2)"),
    "float label": ("a.jsonl", '{"text": "a", "label": 0.5}\n', "label 0.5 is neither"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_every_refusal_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    name, content, says = REFUSALS[case]
    path = tmp_path / name if content is None else _write(tmp_path, name, content)
    with pytest.raises(UserError) as caught:
        read_text_dataset(path)
    message = str(caught.value)
    assert says in message and str(path) in message and "\n" not in message


def test_a_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "texts.csv"
    folder.mkdir()
    with pytest.raises(UserError, match="is a directory"):
        read_text_dataset(folder)
