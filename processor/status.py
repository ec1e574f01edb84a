"""What `engram status` reports: counts, the projects (one each, whatever folders its sessions ran in), and capture
lag for recently active sessions.

While the processor runs, `engram status` prints its answer (``current_status``), and only the
formatting is imported; the database side (apsw, the job queue) is imported when it is read here.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from processor.config import AGENT_NAMES, Settings
from processor.jobs.status_text import format_jobs_status

ACTIVE_WINDOW_MS = 24 * 3600 * 1000
STATUS_TIMEOUT_SECONDS = 5.0
PROJECTS_LISTED = 10


def _iso(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds") if ms else None


def current_status(settings: Settings) -> dict[str, Any]:
    """The running processor's view when it answers (its job worker's extractor, problem and current job
    included), else the database's."""
    from processor.service.control_client import ControlError, request

    try:
        return request(settings.run_dir, "GET", "/status", timeout=STATUS_TIMEOUT_SECONDS)
    except ControlError:
        return collect_status(settings)


def collect_status(settings: Settings) -> dict[str, Any]:
    """Counts first (the integers scripts read), then per-session capture lag and capture problems."""
    from processor.capture.formats import unknown_records
    from processor.clock import now_ms as clock_now_ms
    from processor.jobs.status import jobs_status
    from processor.share.commands import status_of as share_status
    from processor.store import cold as cold_sql
    from processor.store import connect, migrate, sessions
    from processor.store import episodes as episodes_sql
    from processor.store import projects as projects_sql

    if not settings.db_path.exists():
        return {"sessions": 0, "messages": 0, "episodes": 0, "db": str(settings.db_path), "db_exists": False,
                "active_sessions": [], "capture_problems": capture_problems(settings)}
    conn = connect(settings.db_path)
    try:
        migrate(conn)
        status: dict[str, Any] = dict(sessions.counts(conn))
        # Which agents wrote them (config.AGENTS).
        status["sessions_by_agent"] = sessions.counts_by_agent(conn)
        by_status = episodes_sql.counts_by_status(conn)
        status["episodes"] = sum(by_status.values())
        status["episodes_by_status"] = by_status
        status["embedding_model"] = episodes_sql.get_meta(conn, "embedding_model")
        status["jobs"] = jobs_status(conn, settings)
        check = cold_sql.latest_context_check(conn)
        status["context"] = None if check is None else {
            "measured_at": _iso(check.measured_at), "session_tokens": check.session_tokens,
            "digest_tokens": check.digest_tokens, "bites_per_message": check.bites_per_message,
            "budget_tokens": check.budget_tokens, "ratio": round(check.ratio, 3)}
        status["open_reviews"] = cold_sql.open_review_count(conn)
        status["share"] = share_status(conn, settings)
        status["db"] = str(settings.db_path)
        status["db_exists"] = True
        now_ms = clock_now_ms()
        active = []
        ends: dict[str, dict[str, int] | None] = {}  # a database of sessions (opencode's): each one's last cursor
        for s in sessions.recent_sessions(conn, now_ms - ACTIVE_WINDOW_MS):
            try:
                st = os.stat(s.transcript_path)
                size, mtime_ms = st.st_size, int(st.st_mtime * 1000)
            except OSError:
                size, mtime_ms = None, None
            found = {
                "session_id": s.session_id,
                "agent": s.agent,
                "project": s.project,
                "messages": s.messages,
                "last_activity": _iso(s.last_activity),
                "transcript": s.transcript_path,
                # Bytes written to the transcript that are not captured yet (None: file gone).
                "capture_lag_bytes": None if size is None else max(size - s.byte_offset, 0),
                "transcript_modified": _iso(mtime_ms),
            }
            if size is not None and _database_of_sessions(s.agent):
                if s.transcript_path not in ends:
                    ends[s.transcript_path] = _session_ends(s.agent, s.transcript_path)
                end = (ends[s.transcript_path] or {}).get(s.session_id)
                # Rows of the session (opencode's events) not captured yet, in place of bytes.
                del found["capture_lag_bytes"]
                found["capture_lag_rows"] = None if end is None else max(end - s.byte_offset, 0)
            active.append(found)
        status["active_sessions"] = active
        # One line a project, whatever folders its sessions ran in (processor/capture/project.py).
        status["project_count"] = projects_sql.project_count(conn)
        status["projects"] = [{"project": p.project, "sessions": p.sessions, "last_activity": _iso(p.last_activity),
                               "also_at": p.checkouts} for p in projects_sql.summaries(conn, PROJECTS_LISTED)]
        status["capture_problems"] = capture_problems(settings)
        # Record types a newer agent CLI wrote that this Engram skipped (counted by the process that read them).
        status["unknown_records"] = unknown_records()
        return status
    finally:
        conn.close()


def _database_of_sessions(agent: str) -> bool:
    from processor.capture.agents import FORMATS
    from processor.capture.formats import SessionDatabase

    return issubclass(FORMATS.get(agent, object), SessionDatabase)


def _session_ends(agent: str, path: str) -> dict[str, int] | None:
    """Each session's cursor past its newest row in the database at `path` (None: it cannot be read now)."""
    from pathlib import Path

    from processor.capture.agents import FORMATS

    try:
        return FORMATS[agent](Path(path).parent).ends(Path(path))  # type: ignore[attr-defined]
    except Exception:  # locked, gone, another schema: no lag to show, never a failed status
        return None


def capture_problems(settings: Settings) -> list[dict[str, Any]]:
    """What keeps transcripts from being captured now (a stale list from a dead processor is ignored)."""
    from processor.capture.agents import transcript_formats
    from processor.capture.discover import survey
    from processor.capture.problems import PROBLEMS_FILE
    from processor.service.pidfile import is_running

    saved = settings.run_dir / PROBLEMS_FILE if is_running(settings.run_dir) else None
    return survey(transcript_formats(settings), saved)


def format_status(status: dict[str, Any]) -> str:
    by_agent = status.get("sessions_by_agent") or {}
    agents = f" ({', '.join(f'{AGENT_NAMES.get(a, a)} {n}' for a, n in by_agent.items())})" if by_agent else ""
    lines = [f"sessions: {status['sessions']}{agents}", f"messages: {status['messages']}",
             f"episodes: {status['episodes']}", f"database: {status['db']}"]
    if not status.get("db_exists"):
        lines.append("nothing captured yet: run `engram run` (or `engram backfill`)")
    if status.get("jobs"):
        lines += format_jobs_status(status["jobs"])
    context = status.get("context")
    if context:
        lines.append(f"context: memory costs about {context['session_tokens']} tokens per session, "
                     f"{context['ratio'] * 100:.0f}% of the {context['budget_tokens']}-token budget "
                     f"(measured {context['measured_at']})")
    if status.get("open_reviews"):
        lines.append(f"reviews: {status['open_reviews']} open (`engram review`)")
    if (status.get("share") or {}).get("configured"):
        from processor.share.commands import format_status as format_share_status

        lines += format_share_status(status["share"])
    projects = status.get("projects") or []
    if projects:
        lines.append(f"projects: {status.get('project_count', len(projects))}")
        for p in projects:
            also = p.get("also_at") or []
            seen = f"  (also ran in {len(also)} other folder{'s' if len(also) != 1 else ''}: worktrees, clones)" \
                if also else ""
            lines.append(f"  {p['project']}  {p['sessions']} session(s), last {p['last_activity'] or '-'}{seen}")
    active = status.get("active_sessions") or []
    if active:
        lines.append(f"active in the last 24 h: {len(active)}")
        for s in active:
            if "capture_lag_rows" in s:
                lag = "lag ?" if s["capture_lag_rows"] is None else f"lag {s['capture_lag_rows']} rows"
            else:
                lag = "file gone" if s["capture_lag_bytes"] is None else f"lag {s['capture_lag_bytes']} B"
            agent = AGENT_NAMES.get(s.get("agent") or "claude", s.get("agent"))
            lines.append(f"  {s['session_id']}  {agent:<11}  {s['messages']:>5} msgs  {s['last_activity'] or '-'}"
                         f"  {lag}  {s['project'] or ''}")
    unknown = status.get("unknown_records") or {}
    for agent, kinds in unknown.items():
        lines.append(f"{AGENT_NAMES.get(agent, agent)} record types not known to this Engram (skipped): "
                     + ", ".join(f"{kind} ×{n}" for kind, n in sorted(kinds.items())))
    problems = status.get("capture_problems") or []
    if problems:
        lines.append(f"capture problems: {len(problems)}")
        lines += [f"  {p['path']}: {p['detail']}" for p in problems]
    return "\n".join(lines)
