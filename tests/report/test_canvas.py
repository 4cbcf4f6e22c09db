"""Drawing a report never touches pyplot: ``quantmark.sweep()`` in a notebook writes a report
in the user's process, and the user's backend and figures must be as they were after it."""

from __future__ import annotations

from tests.conftest import run_json

MODULES = ("quantmark.report.figures", "quantmark.report.size_figure",
           "quantmark.report.recommend_figure", "quantmark.report.ensemble_figure",
           "quantmark.report.profile_tables", "quantmark.report.diagnosis_section",
           "quantmark.store.trend_plot", "quantmark.store.dashboard")


def test_drawing_a_report_keeps_the_users_backend_and_pyplot_empty() -> None:
    found = run_json(f"""
        import importlib, json
        import matplotlib
        matplotlib.use("svg")  # the user's choice, not the report's Agg
        import matplotlib.pyplot as plt
        for name in {MODULES!r}:
            importlib.import_module(name)
        from quantmark.report import figures
        from tests.report.synthetic import MODEL, SYSTEM, config, study
        made = study(config("ort-fp32", [100.0, 110.0, 104.0]),
                     config("ort-int8", [200.0, 221.0, 207.0]))
        drawn = figures.speedup_heatmap(made, SYSTEM, MODEL, "Offline")
        print(json.dumps({{"backend": matplotlib.get_backend(), "open": plt.get_fignums(),
                           "png": drawn.png[:8].hex()}}))
    """, env={"MPLBACKEND": ""}, timeout=300)
    assert found["backend"] == "svg" and found["open"] == []
    assert found["png"] == "89504e470d0a1a0a"  # still drawn: a PNG
