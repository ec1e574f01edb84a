"""What the cold-path job types share: whether memory is near its context budget, and logging a fault once."""

from __future__ import annotations

import logging

import apsw

from processor.config import Settings
from processor.store import cold as cold_sql

STRICT_RATIO = 0.8  # of context_budget_tokens: from here the cold path keeps less active

_logged: set[str] = set()


def log_once(logger: logging.Logger, key: str, message: str, *args: object, level: int = logging.WARNING) -> None:
    """A fault that repeats on every sweep (a repository gone, an LLM naming unknown ids) is logged once."""
    if key in _logged:
        return
    _logged.add(key)
    logger.log(level, message, *args)


def context_ratio(conn: apsw.Connection) -> float:
    """What memory costs the agent per session ÷ context_budget_tokens, from the latest context check (0: none)."""
    check = cold_sql.latest_context_check(conn)
    return check.ratio if check else 0.0


def strict(conn: apsw.Connection, settings: Settings) -> bool:
    """Near the context budget: the inquisitor, curator and sweeps keep less active."""
    return context_ratio(conn) >= STRICT_RATIO
