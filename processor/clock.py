"""Engram's one clock unit: milliseconds since the epoch, as every table stores them."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)


def utc_clock(ms: int) -> str:
    """A stored time for people: ``2026-11-23 08:30:00 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def utc_date(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime((ms or 0) / 1000))
