"""How member outputs become the ensemble's answer: the mean of the members' softmax
probabilities (argmax of it is the class), or a majority vote of their classes."""

from __future__ import annotations

import numpy as np

CLASSES = 1000  # ImageNet: what the dataset's labels index


def probabilities(scores: np.ndarray, label_offset: int = 0, classes: int = CLASSES
                  ) -> np.ndarray:
    """(N, classes) float32 probabilities over the dataset's classes from a member's raw
    output. A model with a background class (label_offset 1) drops it first; rows that are
    already probabilities (non-negative, summing to 1) are kept, logits get a softmax."""
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2:
        raise ValueError(f"an ensemble member must return scores (N, classes), not shape "
                         f"{scores.shape}")
    if scores.shape[1] < label_offset + classes:
        raise ValueError(f"member returned {scores.shape[1]} scores per sample; expected "
                         f"{label_offset + classes}")
    part = scores[:, label_offset:label_offset + classes]
    if (part >= 0).all() and np.allclose(part.sum(axis=1), 1.0, atol=1e-3):
        return np.ascontiguousarray(part)
    shifted = np.exp(part - part.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def combine_mean(member_probabilities: list[np.ndarray]) -> np.ndarray:
    """Class of each sample: argmax of the members' mean probability."""
    return np.mean(np.stack(member_probabilities), axis=0).argmax(axis=1)


def combine_vote(member_probabilities: list[np.ndarray]) -> np.ndarray:
    """Class of each sample: the class most members chose; a tie goes to the tied class with
    the highest mean probability (so three members that all disagree follow the mean)."""
    stacked = np.stack(member_probabilities)  # (members, N, C)
    votes = stacked.argmax(axis=2)  # (members, N)
    mean = stacked.mean(axis=0)
    counts = np.zeros(mean.shape, dtype=np.int32)
    rows = np.arange(mean.shape[0])
    for member_votes in votes:
        np.add.at(counts, (rows, member_votes), 1)
    top = counts == counts.max(axis=1, keepdims=True)
    return np.where(top, mean, -np.inf).argmax(axis=1)


COMBINERS = {"mean": combine_mean, "vote": combine_vote}
