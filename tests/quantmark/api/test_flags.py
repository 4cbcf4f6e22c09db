"""The API's keyword arguments are the CLI's flags by name, parsed and checked by the verb's
own parser: the same namespace as the command line, the same one-line refusals."""

from __future__ import annotations

import pytest

from quantmark import cli
from quantmark.api.flags import arguments
from quantmark.ground.errors import QuantmarkError, UserError


def test_keywords_parse_as_the_command_line_does() -> None:
    given = arguments("run", "run", {"scenario": "Offline", "sut": "ort-int8", "batch_size": 4,
                                     "model": "digits-cnn", "mode": None})
    _, typed = cli.parse(["--scenario", "Offline", "--sut", "ort-int8", "--batch-size", "4",
                          "--model", "digits-cnn"])
    assert vars(given) == vars(typed)


def test_lists_flags_and_switches_take_python_values() -> None:
    args = arguments("sweep", "sweep", {"models": ["digits-cnn", "mnist"],
                                        "suts": ("ort-fp32", "ort-int8"), "accuracy": False,
                                        "sut_option": ["ov_api=async", "ov_streams=1"],
                                        "retry_failed": True, "repeats": 2})
    assert args.models == "digits-cnn,mnist" and args.suts == "ort-fp32,ort-int8"
    assert args.accuracy is False and args.retry_failed is True and args.repeats == 2
    assert args.sut_option == ["ov_api=async", "ov_streams=1"]
    one = arguments("sweep", "sweep", {"sut_option": "ov_api=async"})
    assert one.sut_option == ["ov_api=async"]


def test_positionals_are_named_and_required() -> None:
    args = arguments("compare", "compare", {"a": "x", "b": "y", "paired": True})
    assert (args.a, args.b, args.paired) == ("x", "y", True)
    with pytest.raises(UserError, match=r"quantmark.compare\(\) needs b$"):
        arguments("compare", "compare", {"a": "x"})


def test_an_unknown_name_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UserError) as caught:
        arguments("run", "run", {"scenario": "Offline", "batchsize": 4})
    message = str(caught.value)
    assert "\n" not in message and "unknown argument(s) batchsize" in message
    assert "batch_size" in message and "run.py run --help" in message
    assert caught.value.exit_code == 2 and isinstance(caught.value, QuantmarkError)


def test_a_bad_value_is_refused_with_the_clis_line() -> None:
    with pytest.raises(UserError) as from_api:
        arguments("run", "run", {"scenario": "Offline", "batch_size": "eight"})
    with pytest.raises(UserError) as from_cli:
        cli.parse(["--scenario", "Offline", "--batch-size", "eight"])
    assert str(from_api.value) == str(from_cli.value)
    assert "invalid int value: 'eight'" in str(from_api.value)
