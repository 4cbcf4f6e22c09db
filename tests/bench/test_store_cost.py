"""The store-cost benchmark on a few runs: every copy is recorded as a new job, and each
figure is a median with its interval."""

from __future__ import annotations

import json

from quantmark.bench import store_cost
from tests.quantmark.store.run_folders import EXAMPLE_SWEEP

RECORD = (EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / "SingleStream-b1-r1" /
          "vm-ov-bf16" / "resnet50" / "SingleStream" / "performance" / "run_1" / "results.json")


def test_copies_differ_so_each_is_a_new_job(tmp_path):
    runs = store_cost.copies(RECORD, tmp_path, 3)
    assert len({(run / "results.json").read_text() for run in runs}) == 3


def test_a_few_records_give_both_figures(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert store_cost.main(["--records", "3", "--record", str(RECORD), "--output",
                            str(out)]) == 0
    found = json.loads(out.read_text())
    [sqlite] = found["stores"]
    assert sqlite["jobs_in_store"] == 6 and sqlite["schema"] >= 1
    for figure in ("open_and_record_ms", "record_ms"):
        ms = sqlite[figure]
        assert ms["n"] == 3 and 0 < ms["low"] <= ms["median"] <= ms["high"]
    assert json.loads(capsys.readouterr().out) == found
