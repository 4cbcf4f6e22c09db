"""The characterization report's "Machines" table: which machine each result is from, its CPU,
ISA features and software, so a reader can tell two machines' figures apart."""

from __future__ import annotations

from quantmark.report.characterize import Study
from quantmark.report.table_formats import ordered

MACHINE_HEADER = ["system", "CPU", "arch", "usable CPUs", "ISA features", "software"]


def machine_rows(study: Study) -> list[list[str]]:
    """One row per machine of ``study`` (``MACHINE_HEADER``)."""
    rows = []
    for host, m in study.machines.items():
        software = ", ".join(f"{k} {v}" for k, v in (m.get("software") or {}).items() if v)
        rows.append(ordered(MACHINE_HEADER, {
            # a fleet node's name, with the host it ran on
            "system": f"{host} ({m['hostname']})" if m.get("node") else host,
            "CPU": str(m.get("cpu_model", "")), "arch": str(m.get("arch", "")),
            "usable CPUs": str(m.get("usable_cpus", "")),
            "ISA features": " ".join(m.get("cpu_flags") or []), "software": software}))
    return rows
