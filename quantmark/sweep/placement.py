"""Where a fleet sweep's cells may run: the facts a node advertises and what a cell requires.

A node advertises its machine fingerprint as Ray custom resources (``quantmark_arch:aarch64``,
``quantmark_isa:amx``, ``quantmark_core:cortex-a76``, ``quantmark_board:raspberry-pi-5``,
``quantmark_node:<name>``), each SUT
it can run (``quantmark_sut:ort-int8``) and one ``quantmark_slot``: every cell takes the slot,
so two cells never run at once on one node. A cell requires its SUT, what the user's
``--place PATTERN:REQ,...`` rules say for it, and for a GPU SUT Ray's own ``GPU``. Plain data
and string work only: Ray is imported by ``quantmark.sweep.fleet``, which reads this, as the
plan does when it checks the rules before anything runs (so it sits beside the plan, below the
fleet).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from quantmark.ground.errors import UserError

PREFIX = "quantmark_"
SLOT = PREFIX + "slot"
KINDS = ("arch", "isa", "core", "board", "node")  # "KIND=VALUE" requirements; "gpu" stands alone
# short names for the instruction sets a precision's speed depends on
ISA_ALIASES = {"amx": ("amx_int8", "amx_bf16"), "avx512": ("avx512f",),
               "vnni": ("avx512_vnni",), "dotprod": ("asimddp",)}
BOARD_PREFIX_WORDS = (2, 3)  # "raspberry-pi", "raspberry-pi-5" besides the full board name


def slug(text: str) -> str:
    """A fact as a resource-name part: lower case, runs of anything else become one dash."""
    return re.sub(r"[^a-z0-9_.]+", "-", text.lower()).strip("-")


def resource(kind: str, value: str) -> str:
    return f"{PREFIX}{kind}:{slug(value)}"


def node_resources(name: str, machine: dict[str, Any], suts: list[str] | tuple[str, ...] = ()
                   ) -> dict[str, float]:
    """The custom resources a node with this fingerprint (``fingerprint.machine()``) that can
    run ``suts`` advertises: its name, architecture, instruction sets (each flag, and the
    aliases), ARM core, board, SUTs and the slot."""
    if not slug(name):
        raise UserError(f"node name {name!r} has no letters or digits; pass --name NAME")
    facts = {resource("node", name), resource("arch", str(machine.get("arch") or "unknown"))}
    flags = set(machine.get("cpu_flags") or [])
    facts |= {resource("isa", flag) for flag in flags}
    facts |= {resource("isa", alias) for alias, members in ISA_ALIASES.items()
              if flags & set(members)}
    core = (machine.get("board") or {}).get("cpu_core")  # an ARM core: "Cortex-A76"
    if core:
        facts.add(resource("core", core))
    board = (machine.get("board") or {}).get("model")
    if board:
        words = slug(board).split("-")
        facts |= {resource("board", "-".join(words[:n])) for n in BOARD_PREFIX_WORDS
                  if len(words) > n}
        facts.add(resource("board", board))
    facts |= {resource("sut", sut) for sut in suts}
    return {SLOT: 1.0, **{fact: 1.0 for fact in sorted(facts)}}


def node_name(resources: dict[str, float]) -> str | None:
    """The quantmark name a node advertises, from its resources; None for a node that is not
    a quantmark node (a head started with plain ``ray start``)."""
    mark = PREFIX + "node:"
    return next((key[len(mark):] for key in resources if key.startswith(mark)), None)


@dataclass(frozen=True)
class Rule:
    """``--place PATTERN:REQ,REQ``: cells whose SUT matches the glob need every requirement."""

    pattern: str
    needs: tuple[str, ...]  # "arch=aarch64", "isa=amx", "board=...", "node=...", "gpu"

    def matches(self, sut: str) -> bool:
        return fnmatch.fnmatchcase(sut, self.pattern)


def parse_rule(text: str) -> Rule:
    """``tflite-*:arch=aarch64`` or ``*:node=pi5,core=cortex-a76``; a bad rule is one line."""
    pattern, sep, needs_text = text.partition(":")
    example = "e.g. --place 'tflite-*:arch=aarch64' or --place '*:node=gpu-box'"
    if not sep or not pattern.strip() or not needs_text.strip():
        raise UserError(f"placement rule {text!r}: write SUT_PATTERN:REQUIREMENT[,...], {example}")
    needs = tuple(n.strip() for n in needs_text.split(",") if n.strip())
    for need in needs:
        kind, _, value = need.partition("=")
        if need != "gpu" and (kind not in KINDS or not slug(value)):
            raise UserError(f"placement rule {text!r}: unknown requirement {need!r}; use "
                            f"{', '.join(k + '=VALUE' for k in KINDS)} or gpu ({example})")
    return Rule(pattern.strip(), needs)


def requirements(sut: str, device: str, rules: list[Rule], runs_sut: bool = True
                 ) -> dict[str, float]:
    """The Ray resources one cell of ``sut`` requests: the slot, a node that can run the SUT
    (unless ``runs_sut`` is False: an ensemble needs its members' instead), Ray's GPU for a
    GPU SUT (or a rule's ``gpu``), and every requirement of every rule that matches it."""
    needs: dict[str, float] = {SLOT: 1.0}
    if runs_sut:
        needs[resource("sut", sut)] = 1.0
    if device == "gpu":
        needs["GPU"] = 1.0
    for rule in rules:
        if not rule.matches(sut):
            continue
        for need in rule.needs:
            if need == "gpu":
                needs["GPU"] = 1.0
            else:
                kind, _, value = need.partition("=")
                needs[resource(kind, value)] = 1.0
    return needs


def fits(needs: dict[str, float], offered: dict[str, float]) -> bool:
    """Does a node offering ``offered`` (its total resources) satisfy ``needs``?"""
    return all(offered.get(key, 0.0) >= amount for key, amount in needs.items())


def describe(needs: dict[str, float]) -> str:
    """Requirements as the user wrote them: ``arch=aarch64, gpu``."""
    words = []
    for key in sorted(needs):
        if key == "GPU":
            words.append("gpu")
        elif key.startswith(PREFIX) and key != SLOT:
            kind, _, value = key[len(PREFIX):].partition(":")
            words.append(f"{kind}={value}")
    return ", ".join(words) or "any quantmark node"
