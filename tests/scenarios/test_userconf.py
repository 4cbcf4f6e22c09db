"""user.conf validation: what LoadGen would silently ignore is rejected with the line."""

from __future__ import annotations

import json

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
                           "  # ms\n*.SingleStream.target_latency = 12\n"
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


def _refused_on_line_3(tmp_path, text: str, needle: str) -> None:
    """``text`` after a comment and a blank line is refused in one line naming line 3."""
    path = _conf(tmp_path, "# ok\n\n" + text)
    with pytest.raises(UserError) as info:
        parse_user_conf(path, MODELS)
    assert needle in str(info.value) and f"{path}:3" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, needle", [
    ("*.Offline.target_qps = 0\n", "target_qps = 0 is out of range"),
    ("*.Server.target_qps = -5\n", "target_qps = -5 is out of range"),
    ("*.SingleStream.target_latency = -1\n", "target_latency = -1 is out of range"),
    ("*.Server.target_latency = 0\n", "target_latency = 0 is out of range"),
    ("*.*.min_duration = -1000\n", "min_duration = -1000 is out of range"),
    ("*.*.min_duration = 0\n", "min_duration = 0 is out of range"),
    ("*.*.min_duration = 1e3\n", "write 1000"),
    ("*.*.min_query_count = 10.0\n", "write 10"),
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
    _refused_on_line_3(tmp_path, text, needle)


def test_values_in_range_are_kept(tmp_path):
    path = _conf(tmp_path, "*.Offline.target_qps = 0.5\n*.*.min_duration = 1\n"
                           "*.SingleStream.target_latency_percentile = 99.9\n"
                           "*.*.accuracy_log_probability = 0\n*.*.mode = 2\n"
                           "*.Server.target_latency = 0.25\n")
    assert [e.value for e in parse_user_conf(path, MODELS)] == [0.5, 1, 99.9, 0, 2, 0.25]


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


@pytest.mark.parametrize("text, needle", [
    ("*.Offline.target_qps = 60 # comment\n", "a comment after the value"),
    ("*.Offline.target_qps = 60#comment\n", "a comment after the value"),
    ("*.Offline.target_qps=60\n", "expected 'model.scenario.key = value'"),
    ("*.Offline.target_qps =60\n", "write blanks around '='"),
    ("*.Offline.target_qps # = 60\n", "expected 'model.scenario.key = value'"),
    ("*.Offline.target_qps =\n", "no value after '='"),
    ("*.Offline.target_qps = 60 70\n", "more than one value"),
    ("#comment without a blank\n", "write '# ' at the start"),
    ("*.Offline.target_qps = 1_000\n", "not a number"),
    ("*.*.min_query_count = 010\n", "leading 0 as octal; write 10"),
])
def test_lines_loadgen_ignores_or_refuses_are_named(tmp_path, text, needle):
    _refused_on_line_3(tmp_path, text, needle)


LOADGEN = """
import json, sys
import mlperf_loadgen as lg
settings = lg.TestSettings()
status = settings.FromConfig(sys.argv[1], "resnet50", "Offline")
print(json.dumps({"status": status, "qps": settings.offline_expected_qps,
                  "min_ms": settings.min_duration_ms}))
"""


@pytest.mark.parametrize("data", [
    b"*.Offline.target_qps = 60 # comment\n", b"*.Offline.target_qps=60\n",
    b"#note here\n", b"*.Offline.target_qps = 60\n#*.Offline.target_qps = 70\n",
    b"\t*.Offline.target_qps  =  60 \n# a comment\n#\n",
    b"\xef\xbb\xbf*.Offline.target_qps = 60\n",
])
def test_loadgen_reads_what_validation_accepts(tmp_path, data):
    """LoadGen's own parser is the judge: a file passes validation only if LoadGen, given
    the file validation hands it (``loadgen_copy``), reads it without error and takes its
    value; every other file is refused before LoadGen sees it."""
    import subprocess
    import sys

    from quantmark.scenarios.userconf import loadgen_copy

    path = tmp_path / "user.conf"
    path.write_bytes(data)
    try:
        entries = parse_user_conf(path, MODELS)
    except UserError:
        entries = None
    given = loadgen_copy(path, tmp_path)
    proc = subprocess.run([sys.executable, "-c", LOADGEN, given], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loadgen = json.loads(proc.stdout.strip().splitlines()[-1])
    read = loadgen["status"] == 0 and loadgen["qps"] == 60
    assert (entries is not None) == read, (loadgen, entries)
    if entries is not None:
        assert [(e.key, e.value) for e in entries] == [("target_qps", 60.0)]
