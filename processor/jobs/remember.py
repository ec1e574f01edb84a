"""`remember` jobs: memory_remember / `engram remember` request files, stored through ADD/UPDATE/NOOP.

The writers drop a file in $ENGRAM_HOME/queue/ (processor/capture/remember_inbox.py). Each file becomes one
job (dedupe key = its name). The job stores the memory, commits, and only then deletes the file;
a crash between the two leaves the file, the job runs again and finds the same text already
stored (its content hash), a NOOP, so the memory is never stored twice. No LLM is involved:
remember jobs run while the budget or the breaker pauses extraction.
"""

from __future__ import annotations

import logging

from processor.capture.project import known_project
from processor.capture.remember_inbox import BadRememberFile, pending_remember_files, quarantine, read_remember_file
from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

REMEMBER = "remember"


def dedupe_key(file_name: str) -> str:
    return f"{REMEMBER}:{file_name}"


def find_due(check: DueCheck) -> list[DueJob]:
    """One job per request file in the queue folder (a file already queued keeps its live job)."""
    return [DueJob(dedupe_key(p.name), {"file": p.name}, f"request file {p}")
            for p in pending_remember_files(check.settings.queue_dir)]


def remember_job(ctx: JobContext, job: JobRow) -> None:
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
    # The request names the root of the folder it was made in: a clone's root is its project's.
    project = known_project(ctx.store.conn, request.project) if request.project else None
    episode_id, created = ctx.store.remember(request.text, kind=request.kind, scope=request.scope,
                                             project=project, session_id=request.session_id)
    # Only after the commit: a crash before this line means a rerun, which finds the text stored (NOOP).
    path.unlink(missing_ok=True)
    log.info("remembered %s: %s %s", name, "stored as" if created else "already known as", episode_id)


# No LLM: remember jobs run while the budget or the breaker pauses extraction.
JOB_TYPE = JobType(REMEMBER, remember_job, priority=0, uses_llm=False, due=find_due)
