"""The built-in text set: real English sentences from the prose of the Python reference manual,
which CPython itself ships as ``pydoc_data.topics`` (the text ``help("if")`` shows). Present
wherever Python is, so a run needs no download; it changes with the Python version, so a run
records ``corpus_hash`` (and DESCRIPTION names the version).

The rule is simple and deterministic: paragraphs are the blank-line separated blocks of each
topic (topics in sorted order), cut where the indentation changes (a definition's head from its
body); a paragraph with a heading underline, a table, a grammar rule or a line of code (an
interpreter prompt, a comment, a statement) is dropped whole; a list bullet is stripped. The
rest is split at sentence ends. A sentence is kept when it starts with a capital, ends with . !
or ?, holds 6 to 80 words and is mostly letters (not code). Whitespace is normalised, duplicates
dropped (first kept), and the selection sorted: 2019 sentences from Python 3.11.7's manual.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
from collections.abc import Iterator

from quantmark.ground.errors import UserError

PYTHON_VERSION = platform.python_version()
DESCRIPTION = (f"English sentences from the prose of the Python {PYTHON_VERSION} reference "
               "manual (pydoc_data.topics, shipped with CPython)")
MIN_WORDS, MAX_WORDS = 6, 80
#: a sentence whose non-blank characters are under this share of letters is code, not prose
MIN_LETTER_SHARE = 0.75

#: a sentence ends at . ! or ? (optionally closing a parenthesis) before a capital or a quote
_SENTENCE_END = re.compile(r'(?:(?<=[.!?])|(?<=[.!?]\)))\s+(?=["(]?[A-Z])')
_BULLET = re.compile(r"^(?:[*+-]|\d+\.|\(\d+\))\s+")
_UNDERLINE = frozenset('*=-~^"#+|')
_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.|#)|\s#\s")
_STATEMENT = re.compile(r"^\s*(?:if|elif|else|for|while|def|class|try|except|finally|with|"
                        r"async|match|case)\b.*:$|"
                        r"^\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*[-+*/%&|^@]?=[^=]|"
                        r"^\s*[\w.]+\(.*\)$")


def builtin_sentences() -> tuple[str, ...]:
    """The sentences, sorted (the same tuple on every call of one Python)."""
    return _sentences()


def corpus_hash() -> str:
    """sha256 of the sentences joined by newlines: what exactly a run ran on."""
    return _hash()


def sentences_by_topic() -> dict[str, tuple[str, ...]]:
    """Each manual topic's kept sentences, in the topic's order (a sentence may occur under
    several topics: ``compound`` repeats ``if``'s). Labeled text for a classifier to learn:
    which part of the manual a sentence comes from."""
    topics = _topics()
    return {key: tuple(dict.fromkeys(sentence for paragraph in _paragraphs(topics[key])
                                     for sentence in _split(paragraph)))
            for key in sorted(topics)}


@functools.cache
def _hash() -> str:
    return hashlib.sha256("\n".join(_sentences()).encode()).hexdigest()


@functools.cache
def _sentences() -> tuple[str, ...]:
    topics = _topics()
    seen: dict[str, None] = {}
    for key in sorted(topics):
        for paragraph in _paragraphs(topics[key]):
            for sentence in _split(paragraph):
                seen.setdefault(sentence, None)
    return tuple(sorted(seen))


def _topics() -> dict[str, str]:
    """``pydoc_data.topics.topics``; a one-line UserError where a distribution stripped it."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise UserError("this Python has no pydoc_data (its distribution strips the manual's "
                        "topics), which the built-in text set is made from; install the "
                        "python3 doc/full package (e.g. apt-get install python3-full) or "
                        "pass your own text with --dataset-path") from None
    return dict(topics)


def _paragraphs(text: str) -> Iterator[list[str]]:
    """The prose paragraphs of one topic: blank-line separated blocks without markup or code
    (the manual sets code apart by blank lines), cut where the indentation changes."""
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            block.append(line.rstrip())
            continue
        if block and not any(_is_markup(line) or _is_code(line) for line in block):
            yield from _groups(block)
        block = []


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _groups(block: list[str]) -> Iterator[list[str]]:
    """``block`` cut into runs of lines whose text starts where the run's first line's text
    does (after its bullet: a bullet's wrapped text belongs to it; the next bullet starts a
    run of its own)."""
    group, text_at = [block[0]], _text_at(block[0])
    for line in block[1:]:
        if _indent(line) == text_at:
            group.append(line)
        else:
            yield group
            group, text_at = [line], _text_at(line)
    yield group


def _text_at(line: str) -> int:
    stripped = line.lstrip(" ")
    return _indent(line) + len(stripped) - len(_BULLET.sub("", stripped))


def _is_markup(line: str) -> bool:
    """A heading underline, a table's border, a grammar rule."""
    return set(line.strip()) <= _UNDERLINE or "::=" in line


def _is_code(line: str) -> bool:
    """An interpreter prompt, a comment, or a statement (a block opener, an assignment, a
    call standing alone) that does not end as prose does (wrapped prose can start with
    ``name=value`` and end with a full stop)."""
    if _PROMPT.search(line):
        return True
    return bool(_STATEMENT.search(line)) and not line.rstrip().endswith((".", ",", ";"))


def _split(block: list[str]) -> Iterator[str]:
    """The kept sentences of one paragraph, whitespace normalised."""
    first = _BULLET.sub("", block[0].strip())
    text = " ".join(" ".join([first, *block[1:]]).split())
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        if not MIN_WORDS <= len(words) <= MAX_WORDS:
            continue
        if not sentence[0].isupper() or sentence[-1] not in ".!?":
            continue
        letters = "".join(words)
        if sum(c.isalpha() for c in letters) < MIN_LETTER_SHARE * len(letters):
            continue
        yield sentence
