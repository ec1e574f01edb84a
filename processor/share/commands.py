"""`engram share …`: init, status, push, pull, project, leave — each a function the CLI calls and tests call.

Each returns the lines to print; a problem is a ShareError whose message names the fix. Local memory is
never touched by a failure here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import apsw

from processor.capture.project import project_of_folder
from processor.clock import now_ms, utc_clock
from processor.config import Settings
from processor.share import connection as share_connection
from processor.share.errors import SchemaTooNew, ShareError, explain_connection_error
from processor.share.machine import fingerprint, hostname, new_machine_id
from processor.share.postgres import migrations as schema
from processor.share.postgres import statements as pg
from processor.share.projects import project_key
from processor.share.sync import Sharing
from processor.store import open_store, write_transaction
from processor.store import share as sql


@dataclass
class Outcome:
    lines: list[str]
    data: dict[str, Any]


def init(settings: Settings, *, grants_for: str | None = None, team: str | None = None,
         new_id: bool = False, claim_id: bool = False) -> Outcome:
    """Create or upgrade the shared database's schema, index this machine's model, register this machine."""
    import psycopg

    db = share_connection.connect(settings, require_schema=False)
    lines: list[str] = []
    try:
        try:
            applied = schema.migrate(db.conn)
        except schema.NoVector as exc:
            if "no pgvector" in str(exc):
                raise ShareError(f"the server at {db.where} has no pgvector extension.",
                                 "use a PostgreSQL with pgvector >= 0.7 (managed services: enable the `vector` "
                                 "extension; self-hosted: install postgresql-NN-pgvector), then run "
                                 "`engram share init` again") from None
            raise ShareError(f"the database at {db.where} has no `vector` extension and role {db.role} may not "
                             f"create it.", "ask an administrator to run CREATE EXTENSION vector in that database "
                             "(managed services: enable pgvector in the console), then run `engram share init` "
                             "again") from None
        except schema.SchemaNewer as exc:
            raise SchemaTooNew(f"the shared database at {db.where} has {exc}; this Engram knows up to version "
                               f"{schema.latest_version()} and leaves it as it is.",
                               "upgrade Engram on this machine") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            database = db.conn.info.dbname
            raise ShareError(f"role {db.role} may not create Engram's schema in database {database} ({exc}).",
                             f"have the database owner run `engram share init` once (or GRANT CREATE ON DATABASE "
                             f"{database} TO {db.role}), then the grants it prints for you") from None
        except psycopg.Error as exc:
            raise explain_connection_error(exc, db.where) from None
        lines.append(f"schema: version {schema.latest_version()} at {db.where}"
                     + (f" (applied now: {', '.join(applied)})" if applied else " (up to date)"))
    finally:
        db.close()
    sharing = Sharing(settings)
    try:
        model, dims = sharing._model()
        db = share_connection.connect(settings)
        try:
            if schema.ensure_vector_index(db.conn, model, dims):
                lines.append(f"vector index: HNSW for {model} ({dims} dimensions)")
            else:
                lines.append(f"vector index: none for {model}; team search scans its rows exactly until the "
                             f"database owner runs `engram share init` with this model")
            database = db.conn.info.dbname
        finally:
            db.close()
        if new_id:
            with write_transaction(sharing.conn):
                sql.set_machine_id(sharing.conn, new_machine_id())
            sharing.machine_id = sql.state(sharing.conn).machine_id or sharing.machine_id
        if claim_id:
            db = share_connection.connect(settings)
            try:
                with db.conn.transaction():
                    pg.register_machine(db.conn, sharing.machine_id, hostname(), fingerprint(settings.home), model)
            finally:
                db.close()
        sharing.open()
        role = sharing.db.role if sharing.db else "?"
        lines.append(f"this machine: {sharing.machine_id} ({hostname()}), role {role}")
        lines += sharing.warnings
        lines.append("")
        lines.append(f"grants (the database owner runs these for each person{' and team' if team else ''}):")
        lines.append(schema.grants(database, grants_for or "PERSON", team or "TEAM"))
    finally:
        sharing.close_all()
    return Outcome(lines, {"schema_version": schema.latest_version(), "machine_id": sharing.machine_id})


def push(settings: Settings) -> Outcome:
    sharing = Sharing(settings)
    try:
        report = sharing.push()
    finally:
        sharing.close_all()
    lines = [f"pushed {report.sent} memories ({report.changed} changed on the server)"]
    if report.withdrawn:
        lines.append(f"withdrew {report.withdrawn} memories of sessions that opted out")
    for memory_id, reason in report.kept_local:
        lines.append(f"kept on this machine: {memory_id}: {reason}")
    if report.forgotten_here:
        lines.append(f"erased here {len(report.forgotten_here)} memories forgotten on another machine")
    return Outcome(lines, {"sent": report.sent, "changed": report.changed, "kept_local": len(report.kept_local)})


def pull(settings: Settings, *, reconcile: bool = True) -> Outcome:
    sharing = Sharing(settings)
    try:
        report = sharing.pull()
        erased = sharing.reconcile() if reconcile else []
    finally:
        sharing.close_all()
    lines = [f"pulled {report.received} changes, applied {report.applied}, erased {len(report.erased)} "
             f"(server sequence {report.cursor})"]
    if report.embedded:
        lines.append(f"embedded {report.embedded} pulled memories with this machine's model")
    for memory_id, reason in report.refused:
        lines.append(f"refused {memory_id}: {reason}")
    if erased:
        lines.append(f"erased {len(erased)} copies of memories no longer shared with you")
    return Outcome(lines, {"received": report.received, "applied": report.applied, "erased": len(report.erased),
                           "refused": len(report.refused), "cursor": report.cursor})


def share_project(settings: Settings, path: str | None, team: str | None) -> Outcome:
    """Share a project's memories with a team (team=None: stop sharing it with any team)."""
    root = project_of_folder(settings.db_path, path or os.getcwd())  # a clone: its project on this machine
    key, has_remote = project_key(root)
    lines = [f"project {root}: known across machines as {key}"]
    if not has_remote:
        lines.append("note: it has no git remote, so it is known by its path and matches only clones at the same "
                     "path on other machines. Fix: `git remote add origin URL` (then run this again)")
    sharing = Sharing(settings)
    try:
        db = sharing.open()
        with write_transaction(sharing.conn):
            sql.set_project_key(sharing.conn, root, key, has_remote, now_ms())
        if team is not None:
            if team not in pg.my_teams(db.conn):
                known = pg.team_exists(db.conn, team)
                raise ShareError(f"role {db.role} is not a member of team {team!r}"
                                 + ("" if known else " (no such team)") + ".",
                                 "ask the database owner to run: "
                                 + schema.team_statements(team, db.role, new_team=not known).replace("\n", " "))
            with db.conn.transaction():
                pg.share_project(db.conn, key, team)
            lines.append(f"shared with team {team}: its decisions, conventions, fixes, gotchas, commit messages, "
                         f"project preferences and remembered memories (never conversation, never an opted-out "
                         f"session)")
        else:
            with db.conn.transaction():
                pg.unshare_project(db.conn, key)
            lines.append("shared with no team: teammates' copies are erased at their next pull")
        sharing.refresh_teams()
        report = sharing.push()
        lines.append(f"pushed {report.sent} memories")
    finally:
        sharing.close_all()
    return Outcome(lines, {"project": root, "project_key": key, "has_remote": has_remote, "team": team})


def leave(settings: Settings, team: str, *, withdraw: bool) -> Outcome:
    """Leave a team: its members' memories are erased from this machine (and from your others at their next
    pull); with withdraw, your memories shared with it become private again."""
    sharing = Sharing(settings)
    lines: list[str] = []
    try:
        db = sharing.open()
        with db.conn.transaction():
            withdrawn = pg.withdraw_from_team(db.conn, team, sharing.machine_id) if withdraw else 0
            left = pg.leave_team(db.conn, team)
        if not left:
            lines.append(f"role {db.role} was not a member of team {team!r}")
        else:
            lines.append(f"left team {team}")
        if withdraw:
            lines.append(f"withdrew {withdrawn} of your memories from the team (teammates' copies are erased at their "
                         f"next pull)")
        sharing.refresh_teams()
        sharing.pull()
        erased = sharing.reconcile()
        lines.append(f"erased {len(erased)} teammates' memories from this machine")
    finally:
        sharing.close_all()
    return Outcome(lines, {"left": bool(left), "withdrawn": withdrawn})


def local_status(settings: Settings) -> dict[str, Any]:
    """What this machine knows of its sync, without the network (engram status, the viewer)."""
    if not settings.db_path.exists():
        return {"configured": share_connection.configured(settings)}
    conn = open_store(settings.db_path)
    try:
        return status_of(conn, settings)
    finally:
        conn.close()


def status_of(conn: apsw.Connection, settings: Settings) -> dict[str, Any]:
    """local_status on a connection the caller holds."""
    configured = share_connection.configured(settings)
    state = sql.state(conn)
    oldest = sql.oldest_pending_at(conn)
    now = now_ms()
    problems = sql.problem_counts(conn)
    return {
        "configured": configured,
        "url": share_connection.describe(settings.shared_database_url) if configured else None,
        "machine_id": state.machine_id,
        "pending": sql.pending_count(conn),
        "oldest_pending_seconds": round((now - oldest) / 1000, 1) if oldest else 0.0,
        "pull_cursor": state.pull_cursor,
        "last_push": utc_clock(state.last_push_at) if state.last_push_at else None,
        "last_pull": utc_clock(state.last_pull_at) if state.last_pull_at else None,
        "seconds_since_sync": round((now - state.last_ok_at) / 1000, 1) if state.last_ok_at else None,
        "pushed": state.pushed,
        "pulled": state.pulled,
        "last_error": state.last_error,
        "last_error_fix": state.last_error_fix,
        "last_error_at": utc_clock(state.last_error_at) if state.last_error_at else None,
        "kept_local": problems.get("push", 0),
        "refused": problems.get("pull", 0),
        # Which ones, and why (newest first): what `engram doctor` sends the user here for.
        "problems": [{"id": episode_id, "direction": direction, "reason": reason, "at": utc_clock(at)}
                     for episode_id, direction, reason, at in sql.problems(conn)] if problems else [],
    }


def status(settings: Settings, *, network: bool = True) -> Outcome:
    """`engram share status`: the local view, and (network) how many changes wait on the server."""
    if share_connection.configured(settings):
        Sharing(settings).close_all()  # configured: changes are queued from now on (every memory, the first time)
    data = local_status(settings)
    if data.get("configured") and network:
        try:
            db = share_connection.connect(settings)
            try:
                data["server_waiting"] = pg.waiting_count(db.conn, int(data.get("pull_cursor") or 0),
                                                          others=settings.share_team_replicate)
                data["role"] = db.role
                data["teams"] = pg.my_teams(db.conn)
                data["schema_version"] = db.schema_version
                warning = share_connection.clock_warning(db)
                if warning:
                    data["clock"] = str(warning)
            finally:
                db.close()
        except ShareError as exc:
            data["server_error"] = str(exc)
    return Outcome(format_status(data), data)


def format_status(data: dict[str, Any]) -> list[str]:
    if not data.get("configured"):
        return ["shared memory: off (set shared_database_url in config.toml; docs/shared-memory.md)"]
    lines = [f"shared memory: {data.get('url')}, this machine {data.get('machine_id') or '(not registered yet)'}"]
    if "role" in data:
        lines.append(f"  role {data['role']}, teams: {', '.join(data.get('teams') or []) or 'none'}, "
                     f"schema version {data.get('schema_version')}")
    lag = data.get("seconds_since_sync")
    lines.append(f"  pending: {data.get('pending', 0)} changes to push"
                 + (f" (oldest {data['oldest_pending_seconds']} s)" if data.get("pending") else "")
                 + (f"; last sync {lag} s ago" if lag is not None else "; never synced"))
    if "server_waiting" in data:
        lines.append(f"  lag: {data['server_waiting']} changes on the server not pulled yet "
                     f"(pulled through sequence {data.get('pull_cursor')})")
    lines.append(f"  pushed {data.get('pushed', 0)}, pulled {data.get('pulled', 0)}; last push "
                 f"{data.get('last_push') or '-'}, last pull {data.get('last_pull') or '-'}")
    if data.get("kept_local") or data.get("refused"):
        lines.append(f"  kept on this machine: {data.get('kept_local', 0)} (too large); refused from the server: "
                     f"{data.get('refused', 0)} (bad rows)")
        for problem in data.get("problems") or []:
            verb = "kept here" if problem["direction"] == "push" else "refused"
            lines.append(f"    {problem['id']} {verb} ({problem['at']}): {problem['reason']}")
    if data.get("last_error"):
        lines.append(f"  last error ({data.get('last_error_at')}): {data['last_error']}")
        if data.get("last_error_fix"):
            lines.append(f"    fix: {data['last_error_fix']}")
    if data.get("server_error"):
        lines.append(f"  now: {data['server_error']}")
    if data.get("clock"):
        lines.append(f"  {data['clock']}")
    return lines
