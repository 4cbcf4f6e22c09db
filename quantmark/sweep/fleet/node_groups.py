"""Which cells must share a node, and what each cell requires of its node.

A group is a model's cells of one framework with one set of requirements: its FP32 and INT8
cells then run on one machine, and the speedup between them is a same-machine ratio. An
ensemble's cells join the groups of its members, so the ensemble and each member alone (its
baseline) are measured on one node too.
"""

from __future__ import annotations

from typing import Any

from quantmark.sweep.placement import Rule, requirements
from quantmark.sweep.plan import Cell


class Groups:
    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self._parent: dict[Any, Any] = {}

    def needs(self, cell: Cell) -> dict[str, float]:
        """The resources the cell requests. An ensemble needs what any member needs (a GPU
        for a GPU member), and rules match the ensemble's SUT name and each member's."""
        from quantmark.sut.ensemble.members import parse_members
        from quantmark.sut.registry import SUTS

        if not cell.ensemble:
            return requirements(cell.sut, SUTS[cell.sut].device, self.rules)
        needs = requirements(cell.sut, "cpu", self.rules, runs_sut=False)
        for member in parse_members(cell.ensemble):
            needs |= requirements(member.sut, SUTS[member.sut].device, self.rules)
        return needs

    def learn(self, cells: list[Cell]) -> None:
        """Join every ensemble in ``cells`` to its members' groups before any is placed, so a
        member alone that comes first in the plan already follows the ensemble's node."""
        for cell in cells:
            self.key(cell)

    def key(self, cell: Cell) -> Any:
        """The group's representative key (stable for the life of this object)."""
        from quantmark.sut.ensemble.members import parse_members
        from quantmark.sut.registry import SUTS

        if not cell.ensemble:
            return self._find(self._own(cell.model, SUTS[cell.sut].framework, cell.sut))
        own = ("ensemble", cell.ensemble)
        for member in parse_members(cell.ensemble):
            self._union(own, self._own(member.model, SUTS[member.sut].framework, member.sut))
        return self._find(own)

    def _own(self, model: str, framework: str, sut: str) -> Any:
        from quantmark.sut.registry import SUTS

        # the rules' requirements, not the SUT itself: a framework's precisions share a node
        needs = requirements(sut, SUTS[sut].device, self.rules, runs_sut=False)
        return (model, framework, tuple(sorted(needs)))

    def _find(self, key: Any) -> Any:
        parent = self._parent.setdefault(key, key)
        if parent != key:
            parent = self._parent[key] = self._find(parent)
        return parent

    def _union(self, a: Any, b: Any) -> None:
        root_a, root_b = self._find(a), self._find(b)
        if root_a != root_b:
            self._parent[root_b] = root_a
