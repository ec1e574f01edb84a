"""The SessionStart digest: a short, token-budgeted summary of what Engram remembers for a project.

The SessionStart hook (``recall_hook/session_start.py``, run as ``<engram python> -I -m
recall_hook.session_start`` once per session start: sources startup, resume, clear, compact) prints
``hook_output(event)``; Claude Code adds its ``additionalContext`` to the conversation (seeds 002
and 004: preferences, recent learnings and pending actions at session start). The digest holds, in
this order:

1. preferences and conventions for all projects: active ``scope='global'`` episodes of
   importance high, newest first;
2. this project's important episodes: active, importance high, newest first; the project is the
   git root of the event's ``cwd`` (``processor.capture.project.project_root``), the same key
   capture stores in ``episodes.project``;
3. this project's episodes of the last 48 hours, newest first;
4. pending reviews, when there are any. There is no reviews table yet, so what is counted is
   what needs the user's attention today: remember requests quarantined in
   ``$ENGRAM_HOME/queue/rejected/`` (malformed, never stored) and remember requests still waiting
   in ``$ENGRAM_HOME/queue/`` (not stored yet: the processor is down or behind).

Budget: the whole ``additionalContext`` (fence included) stays within ``session_start_token_budget``
tokens (default 1,500), estimated with Engram's one rule, ``processor.memory.verbatim.estimate_tokens``:
one token per 4 characters, rounded up. Sections 1 and 2 may each take at most 40% of the
budget, so neither can crowd out the others; section 3 gets the rest. A memory that does not fit
is left out whole, never cut mid-line, and a memory already shown in an earlier section is not
repeated.

Speed: three indexed queries (``processor/store/digest.py``: each reads the newest rows of one
index range and stops at its LIMIT) plus two directory listings; no embedding model is loaded.
A progress handler interrupts SQLite at ``DEADLINE_SECONDS`` as a last resort. The database is
opened read-only and never created.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from processor.capture.project import project_root
from processor.capture.remember_inbox import pending_remember_files
from processor.clock import now_ms as clock_now_ms
from processor.config import Settings, load_settings
from processor.memory.verbatim import estimate_tokens
from processor.recall.injections import record_digest
from processor.store import digest as digest_sql
from processor.store.digest import Memory
from recall_hook.hook_io import FENCE_CLOSE, FENCE_OPEN, fence, valid_session_id

if TYPE_CHECKING:
    import apsw

RECENT_HOURS = 48
SECTION_SHARE = 0.4  # of the budget, for each of the first two sections
ROWS_PER_SECTION = 20
MAX_LINE_CHARS = 320
DEADLINE_SECONDS = 0.8


@dataclass(frozen=True)
class Pending:
    rejected: int  # remember requests moved to queue/rejected/: the user should look at them
    queued: int  # remember requests not stored yet

    @property
    def total(self) -> int:
        return self.rejected + self.queued


@dataclass(frozen=True)
class Digest:
    global_high: list[Memory]
    project_high: list[Memory]
    project_recent: list[Memory]
    pending: Pending
    project: str | None


def count_pending(settings: Settings) -> Pending:
    try:
        rejected = sum(1 for p in (settings.queue_dir / "rejected").iterdir() if p.is_file())
    except OSError:
        rejected = 0
    return Pending(rejected=rejected, queued=len(pending_remember_files(settings.queue_dir)))


def collect(conn: apsw.Connection, settings: Settings, project: str | None, now_ms: int) -> Digest:
    limit = ROWS_PER_SECTION
    global_high = digest_sql.global_important(conn, limit)
    project_high: list[Memory] = []
    project_recent: list[Memory] = []
    if project:
        project_high = digest_sql.project_important(conn, project, limit)
        since = now_ms - RECENT_HOURS * 3_600_000
        project_recent = digest_sql.project_recent(conn, project, since, limit)
    return Digest(global_high, project_high, project_recent, count_pending(settings), project)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.replace(FENCE_OPEN, "").replace(FENCE_CLOSE, "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def memory_line(m: Memory) -> str:
    day = time.strftime("%Y-%m-%d", time.gmtime(m.created_at / 1000))
    return f"- [{day}, {m.importance}] {_one_line(m.summary, MAX_LINE_CHARS)} (id: {m.id})"


HEADER = ("Engram memory digest: what earlier sessions taught. For a memory's full context call "
          "memory_expand(id) (a tool of the engram MCP server); to search, memory_recall(query).")


def pending_line(p: Pending, queue_dir: Path) -> str | None:
    if not p.total:
        return None
    parts = []
    if p.rejected:
        parts.append(f"{p.rejected} rejected memory request(s) in {queue_dir / 'rejected'} to fix or delete")
    if p.queued:
        parts.append(f"{p.queued} memory request(s) not stored yet (is the processor running? `engram status`)")
    return f"Pending reviews: {p.total} — " + "; ".join(parts) + "."


def render(digest: Digest, budget: int, queue_dir: Path) -> str | None:
    """The fenced digest within `budget` estimated tokens, or None when there is nothing to say."""
    pending = pending_line(digest.pending, queue_dir)
    fixed = [HEADER] + ([pending] if pending else [])

    def cost(lines: list[str]) -> int:
        return estimate_tokens(fence("\n".join(lines)))

    if cost(fixed) > budget:
        return None
    body: list[str] = []
    shown: set[str] = set()
    project_name = os.path.basename(digest.project.rstrip("/")) if digest.project else ""
    sections = (
        ("Preferences and conventions (all projects):", digest.global_high, SECTION_SHARE),
        (f"Important in this project ({project_name}):", digest.project_high, SECTION_SHARE),
        (f"This project, last {RECENT_HOURS} hours:", digest.project_recent, 1.0),
    )
    for title, memories, share in sections:
        section: list[str] = []
        section_cap = int(budget * share)
        for m in memories:
            if m.id in shown:
                continue
            line = memory_line(m)
            candidate = section + [line] if section else [title, line]
            if cost(candidate) > section_cap or cost([HEADER, *body, *candidate, *fixed[1:]]) > budget:
                continue  # a shorter line further down may still fit
            section = candidate
            shown.add(m.id)
        body.extend(section)
    if not body and not pending:
        return None
    return fence("\n".join([HEADER, *body, *fixed[1:]]))


def hook_output(event: object, settings: Settings | None = None, now_ms: int | None = None) -> str | None:
    """The hook's stdout for this event (None: print nothing). Raises on failures; main() silences them."""
    if not isinstance(event, dict):
        return None
    started = time.monotonic()
    settings = settings or load_settings()
    cwd = event.get("cwd")
    project = project_root(cwd) if isinstance(cwd, str) and cwd else None
    conn = digest_sql.open_readonly(settings.db_path, started + DEADLINE_SECONDS)
    if conn is None:
        return None
    try:
        digest = collect(conn, settings, project, clock_now_ms() if now_ms is None else now_ms)
    finally:
        conn.close()
    context = render(digest, settings.session_start_token_budget, settings.queue_dir)
    if context is None:
        return None
    session_id = event.get("session_id")
    if isinstance(session_id, str) and valid_session_id(session_id):
        # The injection ledger (processor/recall/injections.py); the digest is shown regardless.
        with contextlib.suppress(OSError):
            record_digest(settings.recollections_dir, session_id, context)
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}})
