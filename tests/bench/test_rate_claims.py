"""``bench/rate_claims``: the table it prints (a few rows, few trials: the rates themselves are
checked by the tests of each module and measured by the bench at full size)."""

from __future__ import annotations

from quantmark.bench import rate_claims


def test_the_table_has_a_row_per_claim_with_its_rate_and_verdict(capsys):
    assert rate_claims.main(["--trials", "40", "--only", "e."]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| claim | noise model | trials | measured [95% CI] | holds? |"
    rows = [line.strip("|").split(" | ") for line in lines[2:]]
    assert len(rows) == 8 and all(len(r) == 5 for r in rows)
    coherent = [r for r in rows if "disagree" in r[0]]
    assert coherent and all(r[3].startswith("0.0% [") and r[4].strip() == "yes"
                            for r in coherent)
    assert all(r[4].strip() in ("yes", "NO", "reported") for r in rows)
