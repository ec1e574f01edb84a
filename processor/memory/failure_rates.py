"""How often a command meets a failure: whether its fix is worth telling before every run of the command.

A fix is told right after its failure, always. Before the command it is told only when the next run is likely to
meet that failure: the failure was met in ``RECURRING_SESSIONS`` sessions or more, and in at least half of the
``RECENT_SESSIONS`` sessions that ran the command most lately (since it was first met). A failure that stopped —
the project's commit hook lost the checks that refused (BookMinder dropped its whitespace hooks on 05-25) — is soon
not told before the command: the sessions that ran it clean since outnumber the refusals; while the hook goes on
refusing after an edit of its configuration (BookMinder's did, with other checks), it is told as before.

A tell is read by the agent at every run of the command, so its precision is the rate at which the command fails
that way; a `git commit` that a hook stopped twice in twenty sessions would be warned about eighteen times for
nothing (cipher-box's husky check of generated API files, met only when API files were staged), while a `pytest`
that fails bare in every session without the virtualenv is worth the warning each time.

A run counts when it ran the failing command (its ``cmd:`` key) without the words the fix adds (``uses``: half of
them or more) in it or in the session's calls before it: a session that applied the fix, perhaps because it was
told, proves nothing about the bare command. Only shell commands are counted; a tool's failure (``tool:Read``) is
keyed by the tool, which every call of it shares.
"""

from __future__ import annotations

from collections.abc import Iterable

from processor.hook_kit.tool_keys import command_keys
from processor.memory.stale_fixes import shell_calls
from processor.store.failures import FailureSignature
from processor.store.tool_calls import StoredToolCall

RECURRING_SESSIONS = 2
RECENT_SESSIONS = 6  # the sessions that ran the command most lately: what the rate is read over


def runs_without_fix(rows: Iterable[FailureSignature], calls: list[StoredToolCall]) -> dict[int, int]:
    """The failures (by row id) whose command one session's `calls` (in order) ran without the fix, each with
    the time of its last such run after the failure was first met."""
    by_key: dict[str, list[FailureSignature]] = {}
    for row in rows:
        if row.call_key.startswith("cmd:"):
            by_key.setdefault(row.call_key, []).append(row)
    if not by_key:
        return {}
    runs: dict[int, int] = {}
    for call, words, seen in shell_calls(calls):
        for key in set(command_keys(call.target)) & by_key.keys():  # type: ignore[arg-type]
            for row in by_key[key]:
                at = call.ts_ms or 0
                if at >= (row.first_ms or 0) and not _applies(row.uses or [], seen | words):
                    runs[row.id] = max(runs.get(row.id, 0), at)
    return runs


def _applies(uses: list[str], words: set[str]) -> bool:
    """Whether a call (with the session's calls before it) does what a fix added: half its added words or more,
    as the PreToolUse hook judges it (one shared word, a folder name in every command, proves nothing)."""
    return bool(uses) and sum(u in words for u in uses) * 2 >= len(uses)


def worth_telling_before(ways: Iterable[FailureSignature]) -> bool:
    """Whether a fix (the ways of failing it fixes) is told before its command: met in enough sessions, and in
    at least half of the most recent sessions that ran the command since it was first met."""
    met: dict[str, int] = {}
    ran: dict[str, int] = {}
    for way in ways:
        since = way.first_ms or 0
        for into, seen in ((met, way.sessions), (ran, way.ran or {})):
            for session, at in seen.items():
                if (at or 0) >= since:
                    into[session] = max(into.get(session, 0), at or 0)
    if len(met) < RECURRING_SESSIONS:
        return False
    latest = sorted(met.keys() | ran.keys(), key=lambda s: max(met.get(s, 0), ran.get(s, 0)))[-RECENT_SESSIONS:]
    return 2 * sum(session in met for session in latest) >= len(latest)
