"""user.conf validation: what LoadGen would silently ignore is rejected with the line."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.scenarios.userconf import effective_keys, parse_user_conf

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


@pytest.mark.parametrize("text, needle", [
    ("*.Offline.target_qps = 0\n", "target_qps = 0 is out of range"),
    ("*.Server.target_qps = -5\n", "target_qps = -5 is out of range"),
    ("*.SingleStream.target_latency = -1\n", "target_latency = -1 is out of range"),
    ("*.Server.target_latency = 0\n", "target_latency = 0 is out of range"),
    ("*.*.min_duration = -1000\n", "min_duration = -1000 is out of range"),
    ("*.*.min_query_count = 2.5\n", "use a whole number >= 0"),
    ("*.MultiStream.samples_per_query = 0\n", "use a whole number >= 1"),
    ("*.Server.max_async_queries = -1\n", "use a whole number >= 0"),
    ("*.SingleStream.target_latency_percentile = 0\n", "a percentile above 0"),
    ("*.SingleStream.target_latency_percentile = 101\n", "a percentile above 0"),
    ("*.*.accuracy_log_probability = 1.5\n", "a probability from 0 to 1"),
    ("*.*.mode = 7\n", "LoadGen's TestMode"),
    ("*.*.print_timestamps = 2\n", "use 0 or 1"),
    ("*.Offline.target_qps = nan\n", "target_qps = nan is out of range"),
    ("*.Offline.target_qps = inf\n", "target_qps = inf is out of range"),
])
def test_values_loadgen_would_clamp_are_refused(tmp_path, text, needle):
    path = _conf(tmp_path, "# ok\n\n" + text)
    with pytest.raises(UserError) as info:
        parse_user_conf(path, MODELS)
    assert needle in str(info.value) and f"{path}:3" in str(info.value)
    assert "\n" not in str(info.value)


def test_values_in_range_are_kept(tmp_path):
    path = _conf(tmp_path, "*.Offline.target_qps = 0.5\n*.*.min_duration = 0\n"
                           "*.SingleStream.target_latency_percentile = 99.9\n"
                           "*.*.accuracy_log_probability = 0\n*.*.mode = 2\n"
                           "*.Server.target_latency = 0.25\n")
    assert [e.value for e in parse_user_conf(path, MODELS)] == [0.5, 0, 99.9, 0, 2, 0.25]


def test_every_key_has_its_range():
    from quantmark.scenarios.userconf import KEYS, RANGES

    assert set(RANGES) == set(KEYS)


@pytest.mark.parametrize("data, needle", [
    (b"*.Offline.target_qps = 10\n\x00\x01\x02", ":2 holds a NUL byte"),
    (b"# caf\xe9\n*.Offline.target_qps = 10\n", ":1 is not UTF-8 text (byte 0xe9)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ":3 holds a NUL byte"),
])
def test_binary_file_is_refused_not_parsed(tmp_path, data, needle):
    path = tmp_path / "user.conf"
    path.write_bytes(data)
    with pytest.raises(UserError) as info:
        parse_user_conf(path, MODELS)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_directory_and_symlink_loop_are_named(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        parse_user_conf(tmp_path, MODELS)
    loop = tmp_path / "loop.conf"
    loop.symlink_to(loop)
    with pytest.raises(UserError, match="is a symlink loop"):
        parse_user_conf(loop, MODELS)
