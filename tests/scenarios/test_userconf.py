"""user.conf validation: what LoadGen would silently ignore is rejected with the line."""

from __future__ import annotations

import pytest

from quantmark.errors import UserError
from scenarios.userconf import effective_keys, parse_user_conf

MODELS = ("resnet50", "mobilenetv2", "efficientnet-lite0")


def _conf(tmp_path, text):
    path = tmp_path / "user.conf"
    path.write_text(text)
    return path


def test_valid_file_parses_with_wildcards(tmp_path):
    path = _conf(tmp_path, "# comment\nresnet50.Offline.target_qps = 95.5\n"
                           "*.SingleStream.target_latency = 12  # ms\n"
                           "*.*.min_duration = 60000\n")
    entries = parse_user_conf(path, MODELS)
    assert [(e.model, e.scenario, e.key, e.value) for e in entries] == [
        ("resnet50", "Offline", "target_qps", 95.5),
        ("*", "SingleStream", "target_latency", 12.0),
        ("*", "*", "min_duration", 60000.0),
    ]


@pytest.mark.parametrize("text, needle", [
    ("resnet50.Offline.target_qsp = 10\n", "unknown key 'target_qsp'"),
    ("resnet5.Offline.target_qps = 10\n", "unknown model 'resnet5'"),
    ("resnet50.Ofline.target_qps = 10\n", "unknown scenario 'Ofline'"),
    ("resnet50.Offline.target_qps = fast\n", "not a number"),
    ("resnet50.Offline.target_qps 10\n", "expected 'model.scenario.key = value'"),
    ("resnet50.target_qps = 10\n", "must be model.scenario.key"),
    ("resnet50.Offline.target_latency = 10\n", "has no effect in Offline"),
])
def test_bad_lines_name_the_line(tmp_path, text, needle):
    path = _conf(tmp_path, "# ok\n\n" + text)
    with pytest.raises(UserError) as info:
        parse_user_conf(path, MODELS)
    message = str(info.value)
    assert needle in message
    assert f"{path}:3" in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        parse_user_conf(tmp_path / "nope.conf", MODELS)


def test_effective_keys_follow_loadgen_precedence(tmp_path):
    path = _conf(tmp_path, "*.*.min_duration = 1\n*.Offline.min_duration = 2\n"
                           "resnet50.*.min_duration = 3\nresnet50.Offline.min_duration = 4\n"
                           "mobilenetv2.Offline.target_qps = 7\n")
    entries = parse_user_conf(path, MODELS)
    assert effective_keys(entries, "resnet50", "Offline") == {"min_duration": 4.0}
    assert effective_keys(entries, "resnet50", "Server") == {"min_duration": 3.0}
    assert effective_keys(entries, "mobilenetv2", "Offline") == {"min_duration": 2.0,
                                                                 "target_qps": 7.0}
    assert effective_keys(entries, "mobilenetv2", "SingleStream") == {"min_duration": 1.0}
