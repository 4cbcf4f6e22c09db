"""A dataset folder's containment: every listed image must resolve inside the folder (no '..'
or symlink leading out), checked cheaply enough for ImageNet's 50,000 files. Its own module
so that every dataset reader (ImageNet lists, class folders, the detection task's COCO and
YOLO layouts) uses one rule without importing another reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from quantmark.ground.errors import UserError


def quoted(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters, quoted: for naming a path in an
    error."""
    text = text.replace("\r", " ").replace("\n", " ")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


class Containment:
    """Resolves listed paths against the folder's real path: one realpath per distinct parent
    folder (ImageNet val has one) and one lstat per file, not a realpath per file."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.real = os.path.realpath(root)
        self.prefix = self.real.rstrip(os.sep) + os.sep
        self.parents: dict[str, str] = {}

    def stat(self, rel: str, where: str) -> os.stat_result:
        """The image's stat (following a symlink) once it is known to stay inside."""
        path = os.path.join(self.root, rel)
        parent, name = os.path.split(path)
        if name in ("", ".", ".."):
            real = os.path.realpath(path)
        else:
            if parent not in self.parents:
                self.parents[parent] = os.path.realpath(parent)
            real = os.path.join(self.parents[parent], name)
        self.check(rel, real, where)
        info = os.lstat(real)
        if stat.S_ISLNK(info.st_mode):
            self.check(rel, os.path.realpath(real), where)
            info = os.stat(real)
        return info

    def check(self, rel: str, real: str, where: str) -> None:
        """Refuse ``rel`` whose real path ``real`` lies outside the folder."""
        if real != self.real and not real.startswith(self.prefix):
            raise UserError(
                f"{where}: {quoted(rel)} resolves to {quoted(real, 120)}, outside the dataset "
                f"folder {quoted(self.real, 120)}; move the image into the folder "
                "(no '..' or symlink leading out)"
            )
