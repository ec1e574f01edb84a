"""One line of `engram doctor`'s report: what was looked at, whether it is right, and the fix when it is not.

Doctor makes most of them; each agent's install module (processor/install/) makes those about Engram's
registration with that agent, so this type sits below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Check:
    """One line of the report. ``fix`` is what the user should run or change when ``ok`` is False."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    severity: Severity = "error"

    @property
    def failed(self) -> bool:
        """True for a problem that makes doctor exit non-zero (a failed warning does not)."""
        return not self.ok and self.severity == "error"


def passed(name: str, detail: str) -> Check:
    return Check(name, True, detail)


def error(name: str, detail: str, fix: str | None) -> Check:
    return Check(name, False, detail, fix, "error")


def warning(name: str, detail: str, fix: str | None) -> Check:
    return Check(name, False, detail, fix, "warning")


def shown_path(path: Path | str, env: Mapping[str, str]) -> str:
    """A path as the user would type it: ~ for their home directory."""
    home = env.get("HOME") or str(Path.home())
    text = str(path)
    if home and home != "/" and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")) :]
    return text
