"""The one door for captured text: nothing a session said or did is kept, logged or sent before redaction.

Text that came from a session (a message, a tool call's target or error, a lesson, an entity, an LLM prompt, a
log line, what is pushed to a shared database) may hold a secret. Rather than trusting every caller to remember
``redact()``, redacted text has a type of its own, ``Redacted``, and the doors take only that type:

- the store: every function of ``processor/store/`` that writes text from a session takes ``Redacted`` fields
  and passes them through ``redacted()``, which lets a ``Redacted`` through untouched and redacts anything else
  (a caller that forgot costs a second scan, never a leak: nothing is refused, so nothing is lost);
- the LLM gate (``processor/jobs/llm_gate.py``): every prompt, before any backend sees it;
- logs (``processor.redaction.logs``): every record the processor or the CLI writes;
- what leaves the machine (``processor/share/push.py``): every memory and message pushed.

A ``Redacted`` can only be made by redaction: ``Redacted(text)`` scans ``text``. String operations on one
(slicing, joining, formatting) give back a plain ``str``, since joining two clean halves can make a secret
(``password=`` + ``hunter2``): what is built from redacted pieces goes through the door again.

Importing this package is cheap: the rules (``processor.redaction.rules``, compiled patterns) are loaded the
first time text is scanned.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTION_KINDS", "Redacted", "redact", "redacted", "redacted_json", "redacted_list", "rules_fingerprint"]


def _scrub(text: str) -> str:
    from processor.redaction.rules import scrub

    return scrub(text)


class Redacted(str):
    """Text that has been through redaction (``[REDACTED:<kind>]`` where a secret was): the only text the
    store writes. ``Redacted(text)`` redacts; a ``Redacted`` given to it comes back as it is."""

    __slots__ = ()

    def __new__(cls, text: str = "") -> Redacted:
        if type(text) is cls:
            return text  # type: ignore[return-value]
        return str.__new__(cls, _scrub(str(text)))

    @classmethod
    def _of_clean(cls, text: str) -> Redacted:
        """Wrap text known to hold only redacted pieces and structure (JSON made of ``Redacted`` strings)."""
        return str.__new__(cls, text)


def redact(text: str) -> Redacted:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]`` (see ``REDACTION_KINDS``): keys, URL users
    and hosts stay readable, only the secret value goes. Idempotent, and safe on any string."""
    return Redacted(text)


def redacted(text: str | None) -> Redacted | None:
    """The door itself: ``None`` stays ``None``, a ``Redacted`` passes, anything else is redacted here."""
    return None if text is None else Redacted(text)


def redacted_list(texts: Iterable[str]) -> list[Redacted]:
    return [Redacted(t) for t in texts]


def _redact_values(value: Any) -> Any:
    if isinstance(value, str):
        return Redacted(value)
    if isinstance(value, dict):
        return {k: _redact_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_values(v) for v in value]
    return value


def redacted_json(value: Any, **dumps: Any) -> Redacted:
    """``value`` as JSON with every string in it redacted first (keys are structure, not captured text).

    Redacting the serialised text instead could cut across a JSON escape; redacting each string cannot."""
    return Redacted._of_clean(json.dumps(_redact_values(value), **dumps))


def __getattr__(name: str) -> Any:
    if name == "REDACTION_KINDS":
        from processor.redaction.rules import REDACTION_KINDS

        return REDACTION_KINDS
    raise AttributeError(f"module 'processor.redaction' has no attribute {name!r}")


def rules_fingerprint() -> str:
    """Which redaction rules are in force: a hash of their source. Stored text is passed through the door again
    when it changes (``processor/store/rescan.py``), so rules widened in an upgrade reach what was kept before."""
    import hashlib
    from pathlib import Path

    here = Path(__file__).parent
    digest = hashlib.sha1()
    for name in ("rules.py", "secret_rules/gitleaks_rules.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]
