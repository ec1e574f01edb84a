"""`remember` jobs: memory_remember / `engram remember` request files, stored through ADD/UPDATE/NOOP.

The writers drop a file in ~/.engram/queue/ (processor/memory/remember.py). Each file becomes one
job (dedupe key = its name). The job stores the memory, commits, and only then deletes the file;
a crash between the two leaves the file, the job runs again and finds the same text already
stored (its content hash), a NOOP, so the memory is never stored twice. No LLM is involved:
remember jobs run while the budget or the breaker pauses extraction.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import apsw

from processor.config import Settings
from processor.jobs.dedupe import Candidate
from processor.memory.episodes import KINDS, SCOPES
from processor.memory.remember import BadRememberFile, pending_remember_files, quarantine, read_remember_file
from processor.memory.verbatim import summarize
from processor.store import jobs as sql

if TYPE_CHECKING:
    from processor.jobs.queue import JobContext

log = logging.getLogger(__name__)

REMEMBER = "remember"


def dedupe_key(file_name: str) -> str:
    return f"{REMEMBER}:{file_name}"


def pending_files(settings: Settings) -> list[str]:
    return [p.name for p in pending_remember_files(settings.queue_dir)]


def enqueue_remember_files(conn: apsw.Connection, settings: Settings, priority: int, now_ms: int) -> int:
    """One job per request file not already queued; returns how many were queued now."""
    queued = 0
    for name in pending_files(settings):
        if sql.insert_job(conn, REMEMBER, dedupe_key(name), priority, {"file": name}, now_ms) is not None:
            queued += 1
    return queued


def remember_job(ctx: JobContext, job: sql.JobRow) -> None:
    from processor.jobs.queue import JobRejected

    name = job.payload.get("file")
    # A bare file name inside the queue folder: a payload can never point elsewhere.
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise JobRejected(f"remember job #{job.id} has no valid file name in its payload {job.payload!r}")
    path = ctx.settings.queue_dir / name
    if not path.exists():
        log.info("remember request %s is already stored (its file is gone)", name)
        return
    try:
        request = read_remember_file(path)
    except BadRememberFile as exc:
        quarantine(path, str(exc))
        return
    text = request.text.strip()
    kind = request.kind if request.kind in KINDS else "other"
    scope = request.scope if request.scope in SCOPES else ("project" if request.project else "global")
    candidate = Candidate(
        summary=summarize(text, ""), full_content=text, entities=[],
        importance="high" if kind in ("preference", "convention", "decision") else "normal",
        kind=kind, scope=scope, source_type="manual", session_id=request.session_id,
        project=request.project if scope == "project" else None,
    )
    [outcome] = ctx.deduper.apply([candidate])
    # Only after the commit: a crash before this line means a rerun, which finds the text stored (NOOP).
    path.unlink(missing_ok=True)
    log.info("remembered %s: %s %s", name, outcome.action, outcome.episode_id)
