"""A text model's sequence length as a sweep dimension, and the text settings every cell shares.

``--seq-lens 32,128,384`` (sweep file key ``seq_lens``) runs each text model x SUT once per
length, as ``--image-sizes`` runs an image model once per size (``quantmark.sweep.axes``); the
cell records its length and its id and folder carry it on the model part
(``minilm+seq=32/ort-int8dyn/Offline-b8-r1``), so two lengths never share a run folder, a
manifest entry or a report row. A cell at the text task's default length (a run without
``--seq-len``) carries none: a sweep without ``--seq-lens`` has exactly the cells it had, and
adding ``--seq-lens 32,128`` to a finished text sweep reuses its cells at 128.

``--padding`` and ``--tokenizer`` are run-wide (every cell gets them, as run.py takes them).
Lengths are a text model's, sizes an image model's: either flag on the other kind of model is
one line naming the fix, found before the text model is resolved (the built-in MiniLM is not
exported just to be refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError

if TYPE_CHECKING:
    from quantmark.sweep.spec import SweepSpec

SEQ_LENS_FLAG = "--seq-lens (seq_lens in a sweep file)"
SEQ_LENS_FIX = "give token counts, e.g. --seq-lens 32,128,384 or seq_lens = [32, 128]"
TEXT_TASK = "text"
PADDINGS = ("fixed", "dynamic")
#: the padding a run without --padding uses (the text task's): recorded as ""
DEFAULT_PADDING = "fixed"


def parse_seq_len(value: Any, where: str = SEQ_LENS_FLAG) -> int:
    """One sequence length as a cell records it; a value that is no whole number of tokens
    (0, negative, 1.5, "abc") is one line naming ``where`` and the fix."""
    text = str(value).strip()
    whole = (isinstance(value, int) and not isinstance(value, bool)) or \
        (isinstance(value, str) and text.isascii() and text.isdigit())
    if not whole or int(text) < 1:
        raise UserError(f"{where} {text!r} is not a sequence length (a whole number of tokens, "
                        f"1 or more); {SEQ_LENS_FIX}")
    return int(text)


def seq_lens(raw: Any, where: str = SEQ_LENS_FLAG) -> list[int]:
    """The sweep's lengths, each checked, in the order given; ``[]`` (the task's default)
    when not given."""
    if raw is None:
        return []
    if isinstance(raw, str):
        items: list[Any] = [item.strip() for item in raw.split(",") if item.strip()]
    else:
        items = list(raw) if isinstance(raw, list | tuple) else [raw]
    found = [parse_seq_len(item, where) for item in items]
    if not found:
        raise UserError(f"{where}: the list is empty; {SEQ_LENS_FIX}")
    return list(dict.fromkeys(found))


def given_seq_lens(settings: dict[str, Any]) -> list[int]:
    """The sweep's ``seq_lens``, else run.py's one ``--seq-len`` (its default 0: not given)."""
    if settings.get("seq_lens") not in (None, ""):
        return seq_lens(settings["seq_lens"])
    one = settings.get("seq_len")
    return seq_lens([one], "--seq-len") if one not in (None, "", 0) else []


def padding(settings: dict[str, Any]) -> str:
    """``--padding`` checked: "dynamic", or "" for the default (fixed), so a sweep that names
    the default resumes one that did not."""
    value = settings.get("padding") or ""
    if value and value not in PADDINGS:
        raise UserError(f"--padding {value!r}: give fixed or dynamic")
    return "" if value == DEFAULT_PADDING else str(value)


def default_seq_len() -> int:
    """The length a text run pads to without ``--seq-len`` (the text task's default)."""
    from quantmark.tasks.text.definition import DEFAULT_SEQ_LEN

    return int(DEFAULT_SEQ_LEN)


def cell_seq_lens(lengths: list[int]) -> list[int]:
    """The lengths a model's cells run at: 0 for the task's default (and when none is
    given), so a cell at the default keeps the id it has without ``--seq-lens``."""
    default = default_seq_len() if lengths else None
    return list(dict.fromkeys(0 if n == default else n for n in lengths)) or [0]


def suffix(seq_len: int) -> str:
    """What a cell's length adds to its model in its id and folder: ``+seq=32``."""
    return f"+seq={seq_len}" if seq_len else ""


def task_name(model: str, model_path: str | None) -> str:
    """The task ``model`` runs as, read as ``catalog.task_for`` picks it (the built-in
    model's owner, else the task claiming the file) but without resolving the model."""
    from quantmark.tasks.catalog import DEFAULT_TASK, all_tasks

    tasks = all_tasks().values()
    if model_path:
        path = Path(model_path)
        if path.suffix != ".onnx" or not path.is_file():
            return DEFAULT_TASK
        return next((task.name for task in tasks if task.claims(path)), DEFAULT_TASK)
    return next((task.name for task in tasks if model in task.models), DEFAULT_TASK)


def check(spec: SweepSpec) -> None:
    """Lengths and the text settings for text models only, sizes for image models only;
    lengths a text model can take at all."""
    text_only = [flag for flag, given in (("--seq-lens", spec.seq_lens),
                                          ("--padding", spec.padding),
                                          ("--tokenizer", spec.tokenizer)) if given]
    if spec.ensembles and text_only:
        raise UserError(f"{text_only[0]} is a text model's setting, and an ensemble's members "
                        "are image models: sweep the ensemble in its own sweep, or drop "
                        f"{text_only[0]}")
    for model in spec.models if text_only or spec.image_sizes else []:
        task = task_name(model, spec.model_path)
        if task != TEXT_TASK and text_only:
            raise UserError(f"{text_only[0]} is a text model's setting, and {model} is a {task} "
                            "model (it takes images): sweep the text models in a sweep of their "
                            f"own, or drop {text_only[0]}"
                            + (" (--image-sizes sweeps an image model's input size)"
                               if text_only[0] == "--seq-lens" else ""))
        if task == TEXT_TASK and spec.image_sizes:
            raise UserError(f"--image-sizes sweeps an image model's input size, and {model} is "
                            "a text model (it takes tokens): give its sequence lengths with "
                            "--seq-lens instead, e.g. --seq-lens 32,128,384 (seq_lens in a "
                            "sweep file)")
    _check_shortest(spec.seq_lens)


def _check_shortest(lengths: list[int]) -> None:
    """Every length long enough for a text model (the longest is checked against the model's
    positions where its dataset is tokenized: ``plan._check_batches_fit``)."""
    from quantmark.tasks.text.tokens import MIN_SEQ_LEN

    short = [n for n in lengths if n < MIN_SEQ_LEN]
    if short:
        raise UserError(f"{SEQ_LENS_FLAG} {short[0]}: a text model takes at least "
                        f"{MIN_SEQ_LEN} tokens ([CLS] and [SEP] leave {MIN_SEQ_LEN - 2} of the "
                        "text's); give e.g. --seq-lens 32,128,384")
