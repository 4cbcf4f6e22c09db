"""Tokenization into QSL samples, checked against the tokenizer's own ``encode``: [CLS] ...
[SEP] kept, truncation counting the special tokens, padding with the tokenizer's pad id, the
caller's tokenizer untouched; the refusals and the length summary."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from quantmark.ground.errors import UserError
from quantmark.tasks.text import tokens

SHORT = "Hello world."
#: exactly 8 tokens with [CLS] and [SEP]: fits seq_len 8 with nothing lost
FITS_8 = "one two three four five six"
LONG = ("The quick brown fox jumps over the lazy dog while the slow grey elephant watches "
        "from a distance, unimpressed by the whole affair.")


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path: Path) -> Tokenizer:
    return tokens.load_tokenizer(tokenizer_path)


def _plain_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The tokenizer's own encoding of ``text``: special tokens, no padding, no truncation."""
    plain = Tokenizer.from_str(tokenizer.to_str())
    plain.no_padding()
    plain.no_truncation()
    return plain.encode(text).ids


def _word_tokenizer(vocab: dict[str, int], unk: str = "[UNK]") -> Tokenizer:
    made = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    made.pre_tokenizer = pre_tokenizers.Whitespace()
    return made


# ----------------------------------------------------------------------------- loading
def test_load_from_a_file_or_its_folder(tokenizer_path: Path) -> None:
    for path in (tokenizer_path, tokenizer_path.parent):
        loaded = tokens.load_tokenizer(path)
        assert loaded.token_to_id("[CLS]") == 101 and loaded.get_vocab_size() == 30522


@pytest.mark.parametrize("case", ["missing", "folder without one", "garbage"])
def test_an_unusable_tokenizer_is_one_line(case: str, tmp_path: Path) -> None:
    path = {"missing": tmp_path / "nowhere" / "tokenizer.json",
            "folder without one": tmp_path,
            "garbage": tmp_path / "tokenizer.json"}[case]
    if case == "garbage":
        path.write_text("{this is not a tokenizer")
    with pytest.raises(UserError) as caught:
        tokens.load_tokenizer(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    assert "tokenizer.json" in message and "pass" in message


# ----------------------------------------------------------------------------- encoding
def test_short_texts_are_padded_as_the_tokenizer_encodes_them(tokenizer: Tokenizer) -> None:
    samples = tokens.encode(tokenizer, [SHORT, FITS_8], 16)
    assert samples.tokens.dtype == np.int64 and samples.tokens.shape == (2, 3, 16)
    assert samples.lengths.dtype == np.int32 and samples.truncated == 0
    for row, text in enumerate([SHORT, FITS_8]):
        own = _plain_ids(tokenizer, text)
        ids, mask, types = samples.tokens[row]
        assert own[0] == 101 and own[-1] == 102  # [CLS] ... [SEP]
        assert ids.tolist() == own + [0] * (16 - len(own))
        assert mask.tolist() == [1] * len(own) + [0] * (16 - len(own))
        assert types.tolist() == [0] * 16
        assert samples.lengths[row] == len(own)


def test_long_texts_are_truncated_keeping_cls_and_sep(tokenizer: Tokenizer) -> None:
    own = _plain_ids(tokenizer, LONG)
    assert len(own) > 12
    samples = tokens.encode(tokenizer, [LONG, FITS_8, SHORT], 12)
    ids = samples.tokens[0, tokens.INPUT_IDS].tolist()
    assert ids == own[:11] + [tokenizer.token_to_id("[SEP]")]
    assert samples.tokens[0, tokens.ATTENTION_MASK].tolist() == [1] * 12
    assert samples.lengths.tolist() == [12, 8, len(_plain_ids(tokenizer, SHORT))]
    assert samples.truncated == 1


def test_a_text_that_exactly_fits_is_not_truncated(tokenizer: Tokenizer) -> None:
    samples = tokens.encode(tokenizer, [FITS_8], 8)
    assert samples.truncated == 0 and samples.lengths.tolist() == [8]
    assert samples.tokens[0, 0].tolist() == _plain_ids(tokenizer, FITS_8)


def test_the_callers_tokenizer_is_left_as_it_was(tokenizer: Tokenizer) -> None:
    """The package's tokenizer.json pads and truncates to 128 itself; encode uses a copy."""
    before = (tokenizer.padding, tokenizer.truncation)
    tokens.encode(tokenizer, [LONG], 10)
    assert (tokenizer.padding, tokenizer.truncation) == before
    assert len(tokenizer.encode(SHORT).ids) == 128


def test_the_pad_id_comes_from_padding_then_vocab_then_zero() -> None:
    vocab = {"[UNK]": 0, "a": 1, "b": 2, "[PAD]": 3}
    by_vocab = _word_tokenizer(vocab)
    assert tokens.pad_id(by_vocab) == 3
    by_padding = _word_tokenizer(vocab)
    by_padding.enable_padding(pad_id=7, pad_token="[P7]")
    assert tokens.pad_id(by_padding) == 7
    neither = _word_tokenizer({"[UNK]": 5, "a": 1, "b": 2})
    assert tokens.pad_id(neither) == 0
    for made, pad in ((by_vocab, 3), (by_padding, 7), (neither, 0)):
        samples = tokens.encode(made, ["a b", "b"], 8)
        assert samples.tokens[:, 0].tolist() == [[1, 2] + [pad] * 6, [2] + [pad] * 7]
        assert samples.lengths.tolist() == [2, 1]


def test_no_texts_make_no_samples(tokenizer: Tokenizer) -> None:
    samples = tokens.encode(tokenizer, [], 32)
    assert samples.tokens.shape == (0, 3, 32) and len(samples) == 0
    assert tokens.length_summary(samples)["max"] is None


@pytest.mark.parametrize("seq_len,max_positions", [(7, 512), (0, None), (513, 512),
                                                   (True, None), (12.0, None), ("64", None)])
def test_out_of_range_lengths_are_refused(tokenizer: Tokenizer, seq_len, max_positions) -> None:
    with pytest.raises(UserError) as caught:
        tokens.encode(tokenizer, [SHORT], seq_len, max_positions=max_positions)
    assert "sequence length" in str(caught.value) and "\n" not in str(caught.value)


def test_the_bounds_themselves_are_accepted(tokenizer: Tokenizer) -> None:
    assert tokens.encode(tokenizer, [SHORT], 8, max_positions=512).seq_len == 8
    assert tokens.encode(tokenizer, [SHORT], 512, max_positions=512).tokens.shape == (1, 3, 512)
    assert tokens.encode(tokenizer, [SHORT], 1024).seq_len == 1024  # no limit given


def test_samples_are_frozen(tokenizer: Tokenizer) -> None:
    samples = tokens.encode(tokenizer, [SHORT], 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        samples.seq_len = 9  # type: ignore[misc]


def test_the_length_summary() -> None:
    lengths = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], dtype=np.int32)
    samples = tokens.TokenSamples(tokens=np.zeros((10, 3, 100), dtype=np.int64),
                                  lengths=lengths, truncated=3, seq_len=100)
    assert tokens.length_summary(samples) == {
        "count": 10, "min": 10, "p50": 55.0, "p90": 91.0, "max": 100, "mean": 55.0,
        "truncated": 3, "seq_len": 100}
