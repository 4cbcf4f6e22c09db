"""``run.py node``: start this machine as a Ray node that advertises its quantmark facts.

One command per machine. It reads the machine fingerprint (architecture, instruction sets,
board) and the SUTs that can run here, and starts ``ray start`` with them as custom resources,
plus the one timing slot::

    python run.py node --head                       # the head (and a node that runs cells)
    python run.py node --address HEAD:6379          # every other machine: x86, GPU box, Pi
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import machine
from quantmark.sweep.placement import SLOT, node_resources

log = logging.getLogger(__name__)


def ray_command(args: Any, facts: dict[str, Any] | None = None) -> list[str]:
    """The ``ray start`` command line for this machine (``args``: the node flags)."""
    facts = facts or machine()
    resources = node_resources(args.name or socket.gethostname(), facts, runnable_suts())
    if args.no_cells:  # a head that only coordinates: no cell is ever placed on it
        del resources[SLOT]
    command = [_ray_cli(), "start", f"--resources={json.dumps(resources)}"]
    if args.head:
        command += ["--head", f"--port={args.port}"]
    else:
        command += [f"--address={args.address}"]
    return command + list(args.ray_args or [])


def runnable_suts() -> list[str]:
    """The SUTs that can run on this machine: the ones a node advertises."""
    from quantmark.sut.registry import SUTS, availability

    return [name for name, info in SUTS.items() if availability(info)[0]]


def _ray_cli() -> str:
    """The ``ray`` script of this Python's environment (a venv's bin/), else the PATH's."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.is_file() else shutil.which("ray")
    if not found:
        raise UserError("Ray is not installed here: pip install -e '.[ray]' (on a Raspberry "
                        "Pi: pip install -e '.[pi,ray]')")
    return found


def start(args: Any) -> int:
    """Start the node (or, with ``--dry-run``, only say what would start); Ray's exit code."""
    if bool(args.head) == bool(args.address):
        raise UserError("run.py node needs --head (the first machine) or --address HEAD:6379 "
                        "(every other one)")
    command = ray_command(args)
    log.info("%s", shlex.join(command))
    if args.dry_run:
        return 0
    return subprocess.call(command)
