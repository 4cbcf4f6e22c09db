"""The commands the guides (docs/guides/*.md) and the README's examples show, and how the slow
tier runs them: each page's ``python run.py ...`` lines in page order, in one folder of the
page's own with a results store of its own, as a user would type them, but on the small
built-in model with short runs. The README's set-up block is left out: CI itself runs its
install and its tests (``.ci/run``), and its ``run.py`` is the default job that
docs/guides/int8-faster.md shows, and that page runs it.

What the test changes is this list (``substitute``), and nothing else; every other flag, SUT,
scenario, file and folder runs as the page shows it:

- ``--model M`` (a built-in model) -> ``--model digits-cnn``: the small built-in CNN (8x8
  digits, 10 classes) converts, quantizes and runs on every CPU SUT in seconds; ResNet-50,
  MobileNetV2 and Lite0 take minutes each on 2 cores.
- ``--models M,...`` -> ``--models digits-cnn``: the same, for a sweep.
- the default job (``python run.py``, no ``--scenario``): runs as shown, EfficientNet-Lite0
  Offline and SingleStream at FP32 and INT8 (2-3 minutes on 2 quiet cores): it is the
  README's main job, and no flag makes it smaller.
- a run (``--scenario``) naming no model: adds ``--model digits-cnn`` (the default model is
  EfficientNet-Lite0).
- a run (``--scenario``): adds ``--user-conf short.conf`` (``*.*.min_duration = 1000``):
  1-second LoadGen runs, not the quick 5-second ones.
- ``--repeats N`` (N > 2) -> ``--repeats 2``: two repeats still make a repeat set with an
  interval.
- ``sweep --suts cpu`` (or ``all``) -> ``--suts ort-fp32,ort-int8``: every CPU SUT is 20
  conversions; two make the same sweep, accuracy runs and report.
- ``sweep``: adds ``--seconds 1`` (a sweep's quick runs last 10 s).
- ``recommend``: ``--suts ort-int8``, ``--seconds 1`` and ``--budget 0.25`` (``6.5`` under an
  accuracy or size limit), added or replacing the page's: one SUT's candidates settle in a
  few rounds; the budget check prices each accuracy run at 60 s, FP32 references included,
  so a search under an accuracy limit needs about 6.2 minutes of budget, a cap the search
  stops far short of on a quiet machine (docs/guides/deploy.md runs ``alone``).

``profile`` runs as shown on the small model (50 profiled inferences of ``digits-cnn`` take a
second); ``compare``, ``report``, ``history`` and ``regress`` read folders or the store the
page's earlier commands wrote, as shown. A command of another verb is not covered: the quick
tier fails on it until a rule covers it or its block carries
``<!-- example: not run: REASON -->``."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT, run_cli
from tests.docs.pages import Block, blocks

SMALL_MODEL = "digits-cnn"
SMALL_SUTS = "ort-fp32,ort-int8"
RECOMMEND_SUTS = "ort-int8"
SHORT_CONF = "short.conf"
SHORT_CONF_TEXT = "*.*.min_duration = 1000\n"
MAX_REPEATS = 2
RECOMMEND_BUDGET = "0.25"
#: the least ``recommend``'s budget check accepts under these limits (about 6.2 minutes: it
#: prices each accuracy run, FP32 references included, at 60 s), rounded up to a half minute
ACCURACY_BUDGET = "6.5"
ACCURACY_LIMITS = ("--max-accuracy-drop", "--max-model-size")
SETUP_BLOCK = "python3 -m venv"  # the README's set-up block holds this line
COMMAND = re.compile(r"^\S*python3? run\.py(?:\s+(?P<args>.*))?$")
COMMAND_TIMEOUT_S = 600

#: the verbs a guide may show, and what keeps each one short
SHORT_BY = {
    "run": "--model digits-cnn, --user-conf short.conf, --repeats 2 (the default job: as shown)",
    "sweep": "--models digits-cnn, --suts ort-fp32,ort-int8, --seconds 1, --repeats 2",
    "recommend": "--model digits-cnn, --suts ort-int8, --seconds 1, --budget 0.25/6.5",
    "profile": "--model digits-cnn",
    "compare": "reads the page's folders",
    "report": "reads the page's folders or its store",
    "history": "reads the page's store",
    "regress": "reads the page's store",
}


class Uncovered(ValueError):
    """No rule makes this command short: a new verb, or a job no flag makes small."""


@dataclass(frozen=True)
class Command:
    """One ``python run.py ...`` line of a page: where it is, its arguments as shown, and why
    it is not run where its block's marker says so."""

    page: Path
    line: int
    shown: tuple[str, ...]
    not_run: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def text(self) -> str:
        return shlex.join(["python", "run.py", *self.shown])

    @property
    def verb(self) -> str:
        return verb_of(self.shown)


def verb_of(argv: Sequence[str]) -> str:
    """The verb quantmark's parser picks: the first word where it names one, else ``run``."""
    from quantmark import commands

    return argv[0] if argv and argv[0] in commands.verbs() else "run"


def guide_pages() -> list[Path]:
    """The pages whose commands run: the README (its examples) and every guide."""
    return [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]


def page_commands(page: Path) -> list[Command]:
    """The page's ``python run.py`` lines in page order (a backslash continues a line). Every
    other line of a shell block is an error: a guide's step the test would silently skip."""
    found = []
    for block in _shell_blocks(page):
        lines = block.text.splitlines()
        number = 0
        while number < len(lines):
            start, text = number, lines[number]
            while text.rstrip().endswith("\\") and number + 1 < len(lines):
                number += 1
                text = text.rstrip()[:-1] + " " + lines[number].strip()
            number += 1
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            match = COMMAND.match(text)
            if not match:
                raise Uncovered(f"{block.name}+{start + 1}: {text!r} is not a python run.py "
                                "command: teach tests/docs/guide_commands.py to run it")
            found.append(Command(page, block.line + start + 1,
                                 tuple(shlex.split(match["args"] or "", comments=True)),
                                 block.not_run))
    return found


def _shell_blocks(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.lang in ("bash", "sh", "shell", "console")
            and not (page.name == "README.md" and SETUP_BLOCK in block.text)]


def _flags(argv: Sequence[str]) -> list[str]:
    """``--flag=value`` as two words, as argparse reads it."""
    return [part for word in argv for part in (word.split("=", 1) if word.startswith("--")
                                               and "=" in word else [word])]


def _replace(argv: list[str], flag: str, value: Callable[[str], str]) -> None:
    for index, word in enumerate(argv[:-1]):
        if word == flag:
            argv[index + 1] = value(argv[index + 1])


def _set(argv: list[str], flag: str, value: str) -> None:
    if flag in argv[:-1]:
        _replace(argv, flag, lambda _: value)
    else:
        argv += [flag, value]


def substitute(shown: Sequence[str]) -> list[str]:
    """The command line the test runs for ``shown`` (the list in the module docstring)."""
    argv, verb = _flags(shown), verb_of(shown)
    if verb not in SHORT_BY:
        raise Uncovered(f"no rule makes `{shlex.join(shown)}` short: {verb} is a verb the "
                        "table does not cover")
    _replace(argv, "--model", lambda _: SMALL_MODEL)
    _replace(argv, "--models", lambda _: SMALL_MODEL)
    _replace(argv, "--repeats", lambda n: str(min(int(n), MAX_REPEATS)))
    if verb == "run" and "--list-suts" not in argv:  # --list-suts runs nothing: as shown
        if "--scenario" not in argv:
            return argv  # the default job, as shown: the README's main job
        if "--model" not in argv and "--model-path" not in argv:
            argv += ["--model", SMALL_MODEL]
        _set(argv, "--user-conf", SHORT_CONF)
    elif verb == "sweep":
        _replace(argv, "--suts", lambda suts: SMALL_SUTS if suts in ("cpu", "all") else suts)
        _set(argv, "--seconds", "1")
    elif verb == "recommend":
        _set(argv, "--suts", RECOMMEND_SUTS)
        _set(argv, "--seconds", "1")
        limited = any(limit in argv for limit in ACCURACY_LIMITS)
        _set(argv, "--budget", ACCURACY_BUDGET if limited else RECOMMEND_BUDGET)
    return argv


def value_of(argv: Sequence[str], flag: str) -> str | None:
    argv = _flags(argv)
    return next((argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag), None)


def runnable(page: Path) -> list[Command]:
    return [command for command in page_commands(page) if command.not_run is None]


def run_page(page: Path, folder: Path, ran: Callable[[str, str], None]) -> None:
    """The page's commands one after another in ``folder`` (a sweep, then the report or
    compare of its folder), with a results store of the page's own; each must exit 0.
    ``ran`` (pytest's ``record_property``) hears of each command run, for the log's count."""
    from tests.docs.guide_files import prepare

    prepare(page, folder)
    env = {"QUANTMARK_STORE": f"sqlite:///{folder / 'store.db'}"}
    for command in runnable(page):
        argv = substitute(command.shown)
        proc = run_cli(*argv, timeout=COMMAND_TIMEOUT_S, env=env, cwd=str(folder))
        ran("docs_guide_command", command.where)
        assert proc.returncode == 0, (
            f"{command.where}: `{command.text}`, run as `python run.py {shlex.join(argv)}` in "
            f"{folder}, exited {proc.returncode}\n--- stderr (tail)\n{proc.stderr[-3000:]}"
            f"\n--- stdout (tail)\n{proc.stdout[-1500:]}")
