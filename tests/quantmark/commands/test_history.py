"""``run.py history``: each series' figures over time with their intervals, its filters, the
one line when nothing matches, and ``--plot``."""

from __future__ import annotations

import pytest

from quantmark import cli
from quantmark.store.results_store import open_store
from tests.conftest import run_cli
from tests.quantmark.store import backends
from tests.quantmark.store.run_folders import T0, make_run

postgres, store_url = backends.postgres, backends.store_url  # the two back ends

DAY = 86_400.0
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def filled(store_url, tmp_path) -> str:
    """Two jobs of one series (a repeat set, then a single INVALID run) and one of another."""
    results = tmp_path / "results"
    runs = [make_run(results / "a", value=v, started_at=T0 + i, repeat=(i + 1, 3, "set-a"))
            for i, v in enumerate((40.0, 42.0, 41.0))]
    runs.append(make_run(results / "b", value=55.0, validity="INVALID", started_at=T0 + DAY,
                         disturbed=True, version="0.2.0"))
    runs.append(make_run(results / "c", sut="ort-int8", value=20.0, started_at=T0 + 2 * DAY,
                         host="pi5"))
    with open_store(store_url) as store:
        for run in runs:
            store.record(run)
    return store_url


def test_each_series_is_listed_with_its_intervals(filled, capsys):
    assert cli.main(["history", "--store", filled]) == 0
    out = capsys.readouterr().out
    assert "resnet50 ov-bf16 SingleStream (latency_ms)" in out
    assert "resnet50 ort-int8 SingleStream (latency_ms)" in out
    assert "41.00 [" in out  # the repeat set's median with its interval
    assert "(55.00, left out)" in out and "INVALID" in out and "DISTURBED" in out
    assert "20.00 (n=1)" in out and "0.2.0" in out and "pi5" in out
    assert out.index("2026-11-21 21:11:40") < out.index("2026-11-22 21:11:40")


def test_filters_narrow_the_history(filled, capsys):
    assert cli.main(["history", "--store", filled, "--sut", "ort-int8"]) == 0
    out = capsys.readouterr().out
    assert "ort-int8" in out and "ov-bf16" not in out
    assert cli.main(["history", "--store", filled, "--machine", "vm", "--since",
                     "2026-11-22", "--version", "0.2.0"]) == 0
    out = capsys.readouterr().out
    assert "(55.00, left out)" in out and "41.00" not in out


def test_nothing_matching_says_which_filter_matched_nothing_exit_1(filled, capsys):
    assert cli.main(["history", "--store", filled, "--model", "bert", "--sut", "ort-int8"]) == 1
    out = capsys.readouterr().out.strip()
    assert out.endswith("matches --model bert") and len(out.splitlines()) == 1
    assert cli.main(["history", "--store", filled, "--sut", "ort-int8", "--machine", "vm"]) == 1
    assert "none matches them all together (--sut ort-int8 --machine vm)" in \
        capsys.readouterr().out


def test_plot_writes_one_png(filled, tmp_path, capsys):
    path = tmp_path / "trend.png"
    assert cli.main(["history", "--store", filled, "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(PNG)
    assert f"trend of 2 series in {path}" in capsys.readouterr().out


def test_a_bad_date_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("history", "--since", "yesterday", "--store", str(tmp_path / "s.sqlite"),
                   timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: date 'yesterday'")
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was opened
