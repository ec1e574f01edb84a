"""What a memory can be: its kinds, scopes and importance levels, and the defaults between them.

No numpy and no model here: the CLI's argument parser, the MCP tool schemas and the extraction
schema read these without loading anything heavy.
"""

from __future__ import annotations

KINDS = ("decision", "preference", "convention", "bugfix", "gotcha", "fact", "task", "other")
SCOPES = ("global", "project")
IMPORTANCES = ("high", "normal")

# Kinds that are standing guidance for later sessions: high importance unless said otherwise.
_HIGH_BY_DEFAULT = frozenset({"preference", "convention", "decision"})


def kind_or_other(kind: str | None) -> str:
    return kind if kind in KINDS else "other"


def default_importance(kind: str) -> str:
    return "high" if kind in _HIGH_BY_DEFAULT else "normal"


def scope_for(scope: str | None, project: str | None) -> str:
    """The given scope if valid, else project-scoped when there is a project, global when not."""
    return scope if scope in SCOPES else ("project" if project else "global")
