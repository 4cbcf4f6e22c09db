"""The built-in sentences from CPython's own pydoc_data: the selection rule on a crafted topic,
the real corpus's size, shape and determinism (a fresh process, another hash seed), its hash,
and the one-line refusal where a distribution stripped pydoc_data."""

from __future__ import annotations

import hashlib
import platform
import sys

import pytest

from quantmark.ground.errors import UserError
from quantmark.tasks.text import corpus
from tests.conftest import run_json

#: on this venv's Python (3.11.7) the rule keeps 2019 sentences; another Python's manual
#: differs a little (3.11.2: 2014), hence a band
COUNT_BAND = (1500, 3000)

CRAFTED = {
    "b-topic": (
        'The "if" statement\n'
        "******************\n"
        "\n"
        'The "if" statement is used for conditional execution.  It selects\n'
        "exactly one of the suites!  Short one.\n"
        "\n"
        '   Compound ::= "statement" and another statement, ending as prose would.\n'
        "\n"
        "   >>> Print(This Line Is A Prompt, Not A Sentence.)\n"
        "\n"
        "   for item in collection:\n"
        "       Total = Total Plus The Item Value Again.\n"
        "\n"
        "   Result Is What The Function Returns To Its Caller  # A Comment Line.\n"
        "\n"
        "* A bullet keeps its sentence but not its marker.\n"
        "  It may wrap onto a second line.\n"
        "* The next bullet starts a paragraph of its own\n"
        "\n"
        "Definition Head\n"
        "   The body of a definition is a paragraph of its own.\n"
        "\n"
        "+------+----------------------------------+\n"
        "| Kind | Meaning                          |\n"
        "+======+==================================+\n"
        '| "x"  | Each cell holds prose. The cell  |\n'
        "|      | text wraps over rows. More here. |\n"
        "+------+----------------------------------+\n"
        "\n"
        "Is a question kept when it has nine words?\n"
        "\n"
        "lower case sentences are not kept at all here.\n"
        "\n"
        "Code like x[i] = {a: b} for c in d() == e.\n"
        "\n"
        "A wrapped line may start like an assignment, as in\n"
        "Numeric_Type=Decimal, and still be prose.\n"
        "\n"
        "(An aside in parentheses is not kept.) Then the next sentence is kept."
    ),
    "a-topic": "The \"if\" statement is used for conditional execution.\n",
}


@pytest.fixture
def crafted(monkeypatch: pytest.MonkeyPatch):
    """The corpus built from CRAFTED instead of the manual (caches cleared both ways)."""
    corpus._sentences.cache_clear()
    corpus._hash.cache_clear()
    monkeypatch.setattr(corpus, "_topics", lambda: dict(CRAFTED))
    yield
    monkeypatch.undo()
    corpus._sentences.cache_clear()
    corpus._hash.cache_clear()


def test_the_selection_rule(crafted) -> None:
    sentences = corpus.builtin_sentences()
    assert sentences == tuple(sorted({
        'The "if" statement is used for conditional execution.',  # once, though in two topics
        "It selects exactly one of the suites!",
        "A bullet keeps its sentence but not its marker.",
        "It may wrap onto a second line.",
        "Is a question kept when it has nine words?",
        "Then the next sentence is kept.",
        "The body of a definition is a paragraph of its own.",
        "A wrapped line may start like an assignment, as in Numeric_Type=Decimal, and still "
        "be prose.",
    }))


def test_the_real_corpus_size_and_shape() -> None:
    sentences = corpus.builtin_sentences()
    low, high = COUNT_BAND
    assert low <= len(sentences) <= high, f"{len(sentences)} sentences"
    assert list(sentences) == sorted(set(sentences))  # sorted, no duplicates
    for sentence in sentences:
        assert corpus.MIN_WORDS <= len(sentence.split()) <= corpus.MAX_WORDS, sentence
        assert sentence == " ".join(sentence.split()), sentence  # whitespace normalised
        assert sentence[0].isupper() and sentence[-1] in ".!?", sentence
        assert ">>>" not in sentence and "::=" not in sentence, sentence
        assert not set(sentence) <= set('*=-~^"#+| '), sentence


def test_the_hash_is_of_the_joined_sentences() -> None:
    joined = "\n".join(corpus.builtin_sentences()).encode()
    assert corpus.corpus_hash() == hashlib.sha256(joined).hexdigest()


def test_the_corpus_is_deterministic_across_processes() -> None:
    """A fresh interpreter with another hash seed selects the very same sentences."""
    code = """
        import json
        from quantmark.tasks.text import corpus
        print(json.dumps({"hash": corpus.corpus_hash(), "count": len(corpus.builtin_sentences())}))
    """
    for seed in ("1", "12345"):
        got = run_json(code, env={"PYTHONHASHSEED": seed})
        assert got == {"hash": corpus.corpus_hash(), "count": len(corpus.builtin_sentences())}


def test_the_description_names_the_python_version() -> None:
    assert platform.python_version() in corpus.DESCRIPTION
    assert "pydoc_data" in corpus.DESCRIPTION and "reference manual" in corpus.DESCRIPTION


def test_a_python_without_pydoc_data_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus._sentences.cache_clear()
    try:
        monkeypatch.setitem(sys.modules, "pydoc_data", None)
        monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)
        with pytest.raises(UserError) as caught:
            corpus.builtin_sentences()
        assert "pydoc_data" in str(caught.value) and "\n" not in str(caught.value)
    finally:
        monkeypatch.undo()
        corpus._sentences.cache_clear()
    assert corpus.builtin_sentences()  # back with the module
