"""``--ensemble MODEL@SUT,...``: parsed and checked before anything is built, each fault one
line naming the member and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from quantmark.ground.errors import UserError

MODES = ("sequential", "concurrent")
COMBINES = ("mean", "vote")
#: the model name LoadGen's config lookups get (ensembles take mlperf.conf's "*" settings)
LOADGEN_MODEL = "ensemble"
#: --sut-option keys the ensemble itself reads (every other option goes to the members)
MEMBER_TIMEOUT_OPTION = "ensemble_member_timeout_s"
DEFAULT_MEMBER_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Member:
    """One model at one SUT."""

    model: str
    sut: str

    @property
    def label(self) -> str:
        return f"{self.model}@{self.sut}"


def parse_members(text: str) -> tuple[Member, ...]:
    """``"efficientnet-lite0@ort-int8,efficientnet-lite1@ov-int8"`` -> members, checked against
    the model zoo and the SUT registry (names only: nothing is imported or built)."""
    from quantmark.models.zoo import get_model
    from quantmark.sut.registry import get_sut

    members: list[Member] = []
    for part in (p.strip() for p in text.split(",")):
        model, sep, sut = part.partition("@")
        if not sep or not model.strip() or not sut.strip():
            raise UserError(f"--ensemble member {part!r}: write MODEL@SUT, e.g. "
                            "efficientnet-lite0@ort-int8,efficientnet-lite1@ov-int8")
        member = Member(model.strip(), sut.strip())
        try:
            get_model(member.model)
            get_sut(member.sut)
        except UserError as exc:
            raise UserError(f"--ensemble member {member.label}: {exc}") from None
        if member in members:
            raise UserError(f"--ensemble names {member.label} twice; each member once")
        members.append(member)
    if len(members) < 2:
        raise UserError(f"--ensemble {text!r} has {len(members)} member; an ensemble needs at "
                        "least two MODEL@SUT, comma-separated")
    return tuple(members)


def canonical(members: tuple[Member, ...]) -> str:
    """The comma-separated spec, as RunConfig.ensemble keeps it."""
    return ",".join(m.label for m in members)


def ensemble_name(members: tuple[Member, ...]) -> str:
    """The results tree's model folder: the members joined with ``+``."""
    return "+".join(m.label for m in members)


def sut_name(mode: str, combine: str) -> str:
    """The results tree's SUT: ``ensemble-sequential``, ``ensemble-concurrent-vote`` ..."""
    check_mode(mode, combine)
    return f"ensemble-{mode}" + ("-vote" if combine == "vote" else "")


def check_mode(mode: str, combine: str) -> None:
    if mode not in MODES:
        raise UserError(f"--ensemble-mode {mode!r}: choose {', '.join(MODES)}")
    if combine not in COMBINES:
        raise UserError(f"--combine {combine!r}: choose {', '.join(COMBINES)}")


def split_threads(total: int, count: int) -> list[int]:
    """Concurrent members share ``total`` cores: an even split, the remainder to the first
    members, at least one each (three members on two cores: one thread each)."""
    base, extra = divmod(max(total, 1), count)
    return [max(1, base + (1 if k < extra else 0)) for k in range(count)]
