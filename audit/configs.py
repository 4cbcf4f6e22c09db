"""Which compliance tests exist, where their audit.config lives, and whether LoadGen used it."""

from __future__ import annotations

from pathlib import Path

from quantmark.ground.errors import UserError

AUDIT_TESTS = ("TEST01", "TEST04")
AUDIT_DIR = Path(__file__).resolve().parent
# LoadGen's own words in the detail log when it finds and applies an audit.config.
APPLIED_MARKER = "Found Audit Config file"


def validate_audit_test(name: str) -> str:
    if name not in AUDIT_TESTS:
        raise UserError(f"unknown audit test '{name}'; choose one of {', '.join(AUDIT_TESTS)} "
                        "(TEST05 was retired in 2024)")
    return name


def audit_config_path(test: str) -> Path:
    """The project's audit.config for ``test`` (the rules' settings for image classification)."""
    return AUDIT_DIR / validate_audit_test(test) / "audit.config"


def audit_was_applied(detail_log: str | Path) -> bool:
    """True when LoadGen says, in the detail log, that it applied an audit.config."""
    path = Path(detail_log)
    return path.is_file() and APPLIED_MARKER in path.read_text(errors="replace")
