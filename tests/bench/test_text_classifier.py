"""The trained text classifier's data and folder (``quantmark.bench.text_classifier``): its
labels are unambiguous, its test sentences never trained it, and the folder it writes is one
quantmark runs as a user's classifier."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from quantmark.bench import text_classifier as tc
from quantmark.tasks.text import corpus


def test_labels_come_from_their_topics_and_none_is_ambiguous() -> None:
    pairs = tc.labeled_sentences()
    by_topic = corpus.sentences_by_topic()
    assert len({text for text, _ in pairs}) == len(pairs)
    for text, label in pairs:
        owners = {name for name, topics in tc.CLASSES.items()
                  if any(text in by_topic.get(topic, ()) for topic in topics)}
        assert owners == {label}
    assert {label for _, label in pairs} == set(tc.CLASSES)


def test_the_test_split_is_held_out_and_covers_every_class() -> None:
    train, test = tc.split(tc.labeled_sentences())
    assert not {t for t, _ in train} & {t for t, _ in test}
    assert len(test) == pytest.approx((len(train) + len(test)) / tc.TEST_EVERY, abs=len(tc.CLASSES))
    assert {label for _, label in test} == set(tc.CLASSES)


def test_csv_is_the_text_label_file_the_task_reads(tmp_path: Path) -> None:
    pairs = [("A sentence, with a comma and \"quotes\".", "strings"), ("Another one.", "debugger")]
    tc.write_csv(tmp_path / "t.csv", pairs)
    with open(tmp_path / "t.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["text"], r["label"]) for r in rows] == pairs


@pytest.mark.slow
def test_folder_is_a_classifier_onnx_and_checkpoint_agree_on(tmp_path: Path) -> None:
    """A few steps of training (not a useful model: the folder's shape is what is tested): the
    ONNX export answers the checkpoint's logits, and the torch SUTs' loader accepts it."""
    import onnxruntime as ort
    import torch
    from transformers import AutoModelForSequenceClassification

    recipe = tc.build_folder(tmp_path / "topics", epochs=1, max_steps=2)
    assert recipe["max_steps"] == 2 and recipe["test"] > 100
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "topics").eval()
    ids = torch.tensor([[101, 2023, 2003, 1037, 6251, 102, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask,
                         token_type_ids=torch.zeros_like(ids)).logits.numpy()
    session = ort.InferenceSession(str(tmp_path / "topics" / "model.onnx"))
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                             "token_type_ids": np.zeros_like(ids.numpy())})[0]
    assert got.shape == (1, len(tc.CLASSES))
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert (tmp_path / "topics" / "tokenizer.json").is_file()
