"""Engram's SessionStart hook: a short, token-budgeted digest of what Engram remembers.

Claude Code runs ``<engram python> -I -m processor.recall.session_start`` once per session start
(sources startup, resume, clear, compact) with the event JSON on stdin
(``{"session_id", "transcript_path", "cwd", "hook_event_name", "source", ...}``) and adds the
``additionalContext`` we print to the conversation (seeds 002 and 004: preferences, recent
learnings and pending actions at session start). The digest holds, in this order:

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

Speed: three indexed queries (``m007_episode_digest_indexes``: each reads the newest rows of one
index range and stops at its LIMIT) plus two directory listings; no embedding model is loaded.
A progress handler interrupts SQLite at ``DEADLINE_SECONDS`` as a last resort.

Failure: a missing database, a locked one (waits at most ``BUSY_TIMEOUT_MS``), an unreadable
stdin, a bad config — anything — ends in exit 0 with nothing on stdout; unexpected errors leave
one line on stderr, never a traceback. The database is opened read-only and never created.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from processor.capture.project import project_root
from processor.config import Settings, load_settings
from processor.memory.remember import pending_remember_files
from processor.memory.verbatim import estimate_tokens
from recall_hook.fence import FENCE_CLOSE, FENCE_OPEN, fence

# Read through Settings when the option exists (processor/config.py OPTIONS), else this default.
DEFAULT_TOKEN_BUDGET = 1500
RECENT_HOURS = 48
SECTION_SHARE = 0.4  # of the budget, for each of the first two sections
ROWS_PER_SECTION = 20
MAX_LINE_CHARS = 320
BUSY_TIMEOUT_MS = 200
DEADLINE_SECONDS = 0.8
STDIN_LIMIT = 1 << 20

_COLUMNS = "id, summary, created_at, importance"
# Each query reads one index range of m007_episode_digest_indexes newest-first and stops at LIMIT.
# `status = 'active'` must appear literally for SQLite to use those partial indexes.
GLOBAL_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND scope = 'global' "
              "AND importance = 'high' ORDER BY created_at DESC LIMIT ?")
PROJECT_IMPORTANT_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? "
                         "AND importance = 'high' ORDER BY created_at DESC LIMIT ?")
PROJECT_RECENT_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? "
                      "AND created_at >= ? ORDER BY created_at DESC LIMIT ?")


@dataclass(frozen=True)
class Memory:
    id: str
    summary: str
    created_at: int
    importance: str


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


def token_budget(settings: Settings) -> int:
    return int(getattr(settings, "session_start_token_budget", DEFAULT_TOKEN_BUDGET))


def open_readonly(db_path: Path, deadline: float) -> apsw.Connection | None:
    """A read-only connection that gives up on locks quickly and on queries at `deadline`; None if no DB."""
    if not db_path.is_file():
        return None
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)  # True interrupts the statement
    return conn


def _memories(conn: apsw.Connection, sql: str, params: tuple) -> list[Memory]:
    return [Memory(*row) for row in conn.execute(sql, params)]


def count_pending(settings: Settings) -> Pending:
    try:
        rejected = sum(1 for p in (settings.queue_dir / "rejected").iterdir() if p.is_file())
    except OSError:
        rejected = 0
    return Pending(rejected=rejected, queued=len(pending_remember_files(settings.queue_dir)))


def collect(conn: apsw.Connection, settings: Settings, project: str | None, now_ms: int) -> Digest:
    limit = ROWS_PER_SECTION
    global_high = _memories(conn, GLOBAL_SQL, (limit,))
    project_high: list[Memory] = []
    project_recent: list[Memory] = []
    if project:
        project_high = _memories(conn, PROJECT_IMPORTANT_SQL, (project, limit))
        since = now_ms - RECENT_HOURS * 3_600_000
        project_recent = _memories(conn, PROJECT_RECENT_SQL, (project, since, limit))
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
    conn = open_readonly(settings.db_path, started + DEADLINE_SECONDS)
    if conn is None:
        return None
    try:
        digest = collect(conn, settings, project, int(time.time() * 1000) if now_ms is None else now_ms)
    finally:
        conn.close()
    context = render(digest, token_budget(settings), settings.queue_dir)
    if context is None:
        return None
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}})


def main() -> int:
    try:
        raw = sys.stdin.buffer.read(STDIN_LIMIT + 1)
        if len(raw) > STDIN_LIMIT:
            return 0
        output = hook_output(json.loads(raw))
        if output:
            sys.stdout.write(output + "\n")
            sys.stdout.flush()
    except (ValueError, apsw.BusyError, apsw.InterruptError, apsw.SQLError, apsw.CantOpenError, OSError):
        pass  # bad stdin, locked/slow/old/missing database: start the session without a digest
    except Exception as exc:  # never a traceback: the session must start regardless
        print(f"engram session_start: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
