"""What a fleet node runs for one cell: the same ``run_cell`` as a local sweep, in a folder of
the node's own, with the results tree and log sent back to the driver as one archive.

Arguments and results are plain dicts and bytes, so a node with another quantmark version
answers with an explained entry rather than an unpickling error.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from quantmark.ground.version import VERSION
from quantmark.sweep.cell import cell_availability, run_cell
from quantmark.sweep.placement import node_name
from quantmark.sweep.plan import Cell, SweepSpec

NODE_ENV = "QUANTMARK_NODE"  # the fingerprint's "node": which fleet node measured a run


def this_node() -> str:
    """The quantmark name of the Ray node this worker runs on (from its resources)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return node_name(node.get("Resources") or {}) or node.get("NodeManagerHostname", "?")
    return "?"


def run_on_node(spec: dict[str, Any], cell: dict[str, Any], driver_version: str
                ) -> dict[str, Any]:
    """Run one cell here; return ``{"entry": manifest entry, "archive": tar.gz bytes}``."""
    node = this_node()
    os.environ[NODE_ENV] = node  # the test process's fingerprint names the node
    base = {**cell, "node": node, "message": ""}
    if driver_version != VERSION:
        return {"entry": {**base, "status": "user_error",
                          "message": f"node {node} runs quantmark {VERSION}, the driver "
                                     f"{driver_version}: install the same version on both"},
                "archive": b""}
    the_cell = Cell.from_dict(cell)
    ok, reason = cell_availability(the_cell)
    if not ok:
        return {"entry": {**base, "status": "unavailable", "message": f"on {node}: {reason}"},
                "archive": b""}
    with tempfile.TemporaryDirectory(prefix="quantmark-cell-") as tmp:
        entry = run_cell(Path(tmp), SweepSpec(**spec), the_cell)
        return {"entry": {**entry, "node": node}, "archive": pack(Path(tmp))}


def pack(root: Path) -> bytes:
    """Everything under ``root`` (the cell's runs/ and logs/) as a gzipped tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for child in sorted(root.iterdir()):
            archive.add(child, arcname=child.name)
    return buffer.getvalue()


def unpack(archive: bytes, root: Path, replaced: list[Path]) -> None:
    """Put a cell's archive into the sweep folder ``root``: extracted beside it first, then
    each of ``replaced`` (the cell's run folder and log) swapped in whole, so a reader never
    sees half a cell and a lost attempt's leftovers never mix with the new one."""
    if not archive:
        return
    with tempfile.TemporaryDirectory(prefix=".incoming-", dir=root) as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # Python before 3.10.12 / 3.11.4: files and folders inside tmp only
                members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                           and not m.name.startswith("/") and ".." not in Path(m.name).parts]
                tar.extractall(tmp, members=members)  # noqa: S202 - members checked above
        for target in replaced:
            source = Path(tmp) / target.relative_to(root)
            if not source.exists():
                continue
            if target.is_dir():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
