"""Tokenization of texts into QSL samples: one int64 ``[3, seq_len]`` block per text (input ids,
attention mask, token type ids), padded and truncated to a fixed length as a benchmark feeds an
encoder. The ``tokenizers`` library does the work (its batch encoding, its truncation that
counts the special tokens, its padding); nothing is tokenized by hand here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quantmark.ground.errors import UserError

if TYPE_CHECKING:  # tokenizers is imported lazily
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
#: the shortest sequence worth benchmarking: [CLS] and [SEP] leave 6 real tokens
MIN_SEQ_LEN = 8
#: rows of a sample's block
INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS = 0, 1, 2
_PAD_TOKEN = "[PAD]"


@dataclass(frozen=True, eq=False)
class TokenSamples:
    """Tokenized texts. ``tokens`` int64 ``[N, 3, seq_len]`` (rows: input ids, attention mask,
    token type ids), ``lengths`` int32 ``[N]`` real tokens after truncation (special tokens
    included), ``truncated`` how many texts lost tokens."""

    tokens: np.ndarray
    lengths: np.ndarray
    truncated: int
    seq_len: int

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def load_tokenizer(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` file, or a folder holding one (as Hugging Face model folders do)."""
    from tokenizers import Tokenizer

    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    fix = ("pass a Hugging Face tokenizer.json (a fast tokenizer's file) or the model folder "
           "that holds one")
    if not file.is_file():
        where = f"{path} holds no {TOKENIZER_FILE}" if path.is_dir() else f"{path} does not exist"
        raise UserError(f"tokenizer {where}; {fix}")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a bad file
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise UserError(f"tokenizer {file} cannot be read ({reason}); {fix}") from None


def pad_id(tokenizer: Tokenizer) -> int:
    """The id padding uses: the tokenizer's own padding config, else its vocabulary's
    ``[PAD]``, else 0."""
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    found = tokenizer.token_to_id(_PAD_TOKEN)
    return 0 if found is None else int(found)


def check_seq_len(seq_len: int, max_positions: int | None = None) -> int:
    """``seq_len`` when an encoder can take it: at least 8 tokens, at most its positions."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int | np.integer):
        raise UserError(f"sequence length {seq_len!r} is not a whole number; pass e.g. 128")
    top = f"at most {max_positions} (the model's positions)" if max_positions else "larger"
    if seq_len < MIN_SEQ_LEN or (max_positions is not None and seq_len > max_positions):
        raise UserError(f"sequence length {seq_len} is out of range; pass at least "
                        f"{MIN_SEQ_LEN} and {top}, e.g. 128")
    return int(seq_len)


def encode(tokenizer: Tokenizer, texts: Sequence[str], seq_len: int,
           max_positions: int | None = None) -> TokenSamples:
    """``texts`` as fixed-length samples: [CLS] ... [SEP] kept, truncated on the right to
    ``seq_len`` tokens (special tokens counted), padded on the right with ``pad_id``. The
    caller's tokenizer is left as it was (a copy is configured)."""
    from tokenizers import Tokenizer

    seq_len = check_seq_len(seq_len, max_positions)
    own = Tokenizer.from_str(tokenizer.to_str())
    padding = tokenizer.padding or {}
    own.enable_truncation(max_length=seq_len, stride=0, strategy="longest_first",
                          direction="right")
    own.enable_padding(direction="right", pad_id=pad_id(tokenizer),
                       pad_type_id=int(padding.get("pad_type_id") or 0),
                       pad_token=str(padding.get("pad_token") or _PAD_TOKEN), length=seq_len)
    encodings = own.encode_batch(list(texts), add_special_tokens=True)
    tokens = np.zeros((len(encodings), 3, seq_len), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        tokens[row, INPUT_IDS] = encoding.ids
        tokens[row, ATTENTION_MASK] = encoding.attention_mask
        tokens[row, TOKEN_TYPE_IDS] = encoding.type_ids
    truncated = sum(1 for encoding in encodings if encoding.overflowing)
    lengths = tokens[:, ATTENTION_MASK].sum(axis=1).astype(np.int32)
    if truncated:
        log.info("%d of %d texts were truncated to %d tokens", truncated, len(encodings),
                 seq_len)
    return TokenSamples(tokens=tokens, lengths=lengths, truncated=truncated, seq_len=seq_len)


def length_summary(samples: TokenSamples) -> dict[str, Any]:
    """The length distribution a run records: min, p50, p90, max and mean of the real lengths,
    how many texts were truncated, the padded length."""
    lengths = samples.lengths
    summary: dict[str, Any] = {"count": int(lengths.size), "truncated": samples.truncated,
                               "seq_len": samples.seq_len}
    if lengths.size == 0:
        return {**summary, "min": None, "p50": None, "p90": None, "max": None, "mean": None}
    return {**summary, "min": int(lengths.min()), "p50": float(np.percentile(lengths, 50)),
            "p90": float(np.percentile(lengths, 90)), "max": int(lengths.max()),
            "mean": round(float(lengths.mean()), 3)}
