"""The SQL of project identity: the repositories and folders seen alive on this machine and the project each is
part of, and the merges of two project keys into one.

``project_roots``: a repository's root (or a folder outside any repository) seen alive, its remote (normalised,
never with credentials) and the project it is part of — its own root, or the first root of the same remote (a
clone). ``project_paths``: a folder seen alive (a session's cwd; a checkout's top folder, under which every
folder belongs to it) and the root it was in; its project is its root's, so a merge changes one column of one
table. ``project_merges``: each project key merged into another, with what moved, recorded in the merge's
transaction.

The lookups take any DB-API connection (``sqlite3`` or apsw): the SessionStart hook reads them beside the
digest's queries, read-only, and must not pay apsw's import. Callers own the transaction.
"""

from __future__ import annotations

from collections import namedtuple  # already loaded by sqlite3; json is not, and the hook does not need it

TYPE_CHECKING = False
if TYPE_CHECKING:
    import apsw

    from processor.redaction import Redacted

# The tables (migration m022_project_identity).
SCHEMA = """
    CREATE TABLE project_roots (
        root     TEXT PRIMARY KEY,
        project  TEXT NOT NULL,
        remote   TEXT,
        seen_at  INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX idx_project_roots_remote ON project_roots(remote, seen_at) WHERE remote IS NOT NULL;
    CREATE INDEX idx_project_roots_project ON project_roots(project);
    CREATE TABLE project_paths (
        path      TEXT PRIMARY KEY,
        root      TEXT NOT NULL,
        checkout  INTEGER NOT NULL DEFAULT 0,
        seen_at   INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE project_merges (
        old         TEXT PRIMARY KEY,
        new         TEXT NOT NULL,
        merged_at   INTEGER NOT NULL,
        sessions    INTEGER NOT NULL,
        memories    INTEGER NOT NULL,
        duplicates  INTEGER NOT NULL
    ) WITHOUT ROWID;
"""

# A missing folder's project: the folder itself seen alive, else the deepest checkout seen alive that holds it.
_PATH_SQL = ("SELECT r.project FROM project_paths p JOIN project_roots r ON r.root = p.root "
             "WHERE p.path = ? OR (p.checkout = 1 AND p.path IN ({})) ORDER BY p.path = ? DESC, length(p.path) DESC "
             "LIMIT 1")

Merge = namedtuple("Merge", "old new sessions memories duplicates")
Root = namedtuple("Root", "root project remote")


def _ancestors(path: str) -> list[str]:
    parts = path.rstrip("/").split("/")
    return ["/".join(parts[:n]) for n in range(len(parts) - 1, 1, -1)]


def project_of_path(conn: object, path: str) -> str | None:
    """The project of a folder seen alive (a session's cwd), or of the checkout seen alive that holds it."""
    above = _ancestors(path)
    row = conn.execute(_PATH_SQL.format(",".join("?" * len(above)) or "NULL"),  # type: ignore[attr-defined]
                       (path, *above, path)).fetchone()
    return row[0] if row else None


def project_of_root(conn: object, root: str) -> str | None:
    row = conn.execute("SELECT project FROM project_roots WHERE root = ?", (root,)).fetchone()  # type: ignore
    return row[0] if row else None


def project_of_remote(conn: object, remote: str) -> str | None:
    """The project of the first root seen with this remote (a clone joins it)."""
    row = conn.execute("SELECT project FROM project_roots WHERE remote = ? ORDER BY seen_at, root LIMIT 1",
                       (remote,)).fetchone()  # type: ignore[attr-defined]
    return row[0] if row else None


def project_for(conn: object, cwd: str, root: str) -> str | None:
    """What the SessionStart hook asks: the project of `root` (the kit's root of `cwd`), else of `cwd` as seen
    alive; None when neither is known (an older store without these tables included)."""
    try:
        return project_of_root(conn, root) or project_of_path(conn, cwd)
    except Exception:  # no such table: a processor not yet restarted on this version migrates it
        return None


def add_root(conn: apsw.Connection, root: str, project: str, remote: Redacted | None, now_ms: int) -> str:
    """Remember a root seen alive; returns its project (the one remembered first, when it was known)."""
    conn.execute("INSERT INTO project_roots(root, project, remote, seen_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT(root) DO UPDATE SET remote = excluded.remote WHERE remote IS NOT excluded.remote",
                 (root, project, remote, now_ms))
    return project_of_root(conn, root) or project


def add_path(conn: apsw.Connection, path: str, root: str, checkout: bool, now_ms: int) -> None:
    """Remember a folder seen alive in `root` (the latest sighting wins: a folder reused for another repository)."""
    conn.execute("INSERT INTO project_paths(path, root, checkout, seen_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT(path) DO UPDATE SET root = excluded.root, checkout = max(checkout, excluded.checkout), "
                 "seen_at = excluded.seen_at WHERE root IS NOT excluded.root OR checkout < excluded.checkout",
                 (path, root, int(checkout), now_ms))


def known_roots(conn: apsw.Connection, limit: int = 500) -> list[str]:
    """The roots seen alive, newest first: where a vanished folder's repository is looked for."""
    return [r[0] for r in conn.execute("SELECT root FROM project_roots ORDER BY seen_at DESC LIMIT ?", (limit,))]


def roots(conn: apsw.Connection) -> list[Root]:
    return [Root(*r) for r in conn.execute("SELECT root, project, remote FROM project_roots ORDER BY root")]


def paths_of(conn: apsw.Connection, project: str) -> list[str]:
    """The other folders a project's sessions ran in: its checkouts seen alive (worktrees, clones) other than its
    own root, and the keys merged into it (folders gone before they were seen)."""
    return [r[0] for r in conn.execute(
        "SELECT p.path FROM project_paths p JOIN project_roots r ON r.root = p.root WHERE r.project = ?1 "
        "AND p.checkout = 1 AND p.path != ?1 UNION SELECT old FROM project_merges WHERE new = ?1 ORDER BY 1",
        (project,))]


Summary = namedtuple("Summary", "project sessions last_activity checkouts")


def summaries(conn: apsw.Connection, limit: int = 20) -> list[Summary]:
    """The projects with sessions, the most recently active first: how many sessions, when the last was active,
    and the other checkouts (worktrees, clones) seen alive of each."""
    rows = conn.execute("SELECT project, count(*), max(last_activity) FROM sessions WHERE project IS NOT NULL "
                        "GROUP BY project ORDER BY max(last_activity) DESC LIMIT ?", (limit,)).fetchall()
    return [Summary(project, count, last, paths_of(conn, project)) for project, count, last in rows]


def project_count(conn: apsw.Connection) -> int:
    return conn.execute("SELECT count(DISTINCT project) FROM sessions WHERE project IS NOT NULL").fetchone()[0]


def keys_in_use(conn: apsw.Connection) -> list[str]:
    """Every project key the store holds, the one of the oldest session first (it keeps its key in a merge)."""
    return [r[0] for r in conn.execute(
        "SELECT project FROM (SELECT project, min(created_at) AS first FROM sessions WHERE project IS NOT NULL "
        "GROUP BY project UNION ALL SELECT DISTINCT project, NULL FROM episodes WHERE project IS NOT NULL "
        "UNION ALL SELECT DISTINCT project, NULL FROM failure_signatures WHERE project IS NOT NULL) "
        "GROUP BY project ORDER BY min(coalesce(first, 9e18)), project")]


def branch_of(conn: apsw.Connection, project: str) -> str | None:
    """The git branch most lines of the project's sessions were on (None: none recorded)."""
    row = conn.execute("SELECT m.git_branch FROM messages m JOIN sessions s ON s.session_id = m.session_id "
                       "WHERE s.project = ? AND m.git_branch IS NOT NULL AND m.git_branch != '' "
                       "GROUP BY m.git_branch ORDER BY count(*) DESC LIMIT 1", (project,)).fetchone()
    return row[0] if row else None


def branches_worked_on(conn: apsw.Connection, project: str | None, limit: int) -> list[tuple[str, str, int]]:
    """The git branches the project's sessions wrote messages on (Claude Code's lines say theirs): (branch, session,
    its newest message there), the most recently worked on first."""
    rows = conn.execute(
        "SELECT m.git_branch, m.session_id, max(coalesce(m.ts_ms, 0)) AS last FROM messages m JOIN sessions s "
        "ON s.session_id = m.session_id WHERE s.project IS ? AND m.git_branch IS NOT NULL AND m.git_branch != '' "
        "GROUP BY m.git_branch, m.session_id ORDER BY last DESC LIMIT ?", (project, limit))
    return [(row[0], row[1], row[2]) for row in rows]


def merges(conn: apsw.Connection) -> list[Merge]:
    return [Merge(*r) for r in conn.execute(
        "SELECT old, new, sessions, memories, duplicates FROM project_merges ORDER BY merged_at, old")]


# --- a merge: everything of `old` becomes `new`'s, in the caller's transaction ------------------------------

# Tables whose rows name their project (the failure signatures are merged row by row: merge_failures).
_PROJECT_TABLES = ("reviews", "sweeps", "automem_files")


def move_rows(conn: apsw.Connection, old: str, new: str) -> tuple[int, int]:
    """Sessions, memories and the rest of `old` become `new`'s; returns (sessions, memories) moved."""
    conn.execute("UPDATE sessions SET project = ? WHERE project = ?", (new, old))
    sessions = conn.changes()
    conn.execute("UPDATE episodes SET project = ? WHERE project = ?", (new, old))
    memories = conn.changes()
    for table in _PROJECT_TABLES:
        conn.execute(f"UPDATE {table} SET project = ? WHERE project = ?", (new, old))
    conn.execute("UPDATE project_roots SET project = ? WHERE project = ?", (new, old))
    conn.execute("DELETE FROM share_projects WHERE project_root = ?", (old,))
    return sessions, memories


def merge_failures(conn: apsw.Connection, old: str, new: str) -> None:
    """`old`'s failure signatures become `new`'s: a way of failing both knew is one row (its sessions joined, the
    first memory that tells its fix kept), the others move as they are."""
    import json

    from processor.store import failures as failures_sql

    for row in conn.execute("SELECT id, fail_key, signature FROM failure_signatures WHERE project = ?",
                            (old,)).fetchall():
        same = failures_sql.find(conn, new, row[1], json.loads(row[2]))
        if same is None:
            conn.execute("UPDATE failure_signatures SET project = ? WHERE id = ?", (new, row[0]))
            continue
        [(sessions, first, last, memory, fix, uses, ran)] = conn.execute(
            "SELECT sessions, first_ms, last_ms, memory_id, fix, uses, ran FROM failure_signatures WHERE id = ?",
            (row[0],)).fetchall()
        joined = {**json.loads(sessions), **same.sessions}
        kept = dict(sorted(joined.items(), key=lambda item: item[1])[-failures_sql.SESSIONS_KEPT:])
        failures_sql.note_runs(conn, same, json.loads(ran))
        conn.execute(
            "UPDATE failure_signatures SET sessions = ?, first_ms = min(coalesce(first_ms, ?), coalesce(?, first_ms)), "
            "last_ms = max(coalesce(last_ms, ?), coalesce(?, last_ms)), memory_id = coalesce(memory_id, ?), "
            "fix = CASE WHEN memory_id IS NULL THEN ? ELSE fix END, "
            "uses = CASE WHEN memory_id IS NULL THEN ? ELSE uses END WHERE id = ?",
            (json.dumps(kept), first, first, last, last, memory, fix, uses, same.id))
        conn.execute("DELETE FROM failure_signatures WHERE id = ?", (row[0],))


def merge_routines(conn: apsw.Connection, old: str, new: str, now_ms: int) -> None:
    """One close-out routine per project: `old`'s is superseded by `new`'s, or becomes `new`'s when it has none."""
    mine = conn.execute("SELECT value FROM meta WHERE key = ?", (f"routine:{old}",)).fetchone()
    theirs = conn.execute("SELECT value FROM meta WHERE key = ?", (f"routine:{new}",)).fetchone()
    if mine is None:
        return
    if theirs is None:
        conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (f"routine:{new}", mine[0]))
    elif mine[0] != theirs[0]:
        conn.execute("UPDATE episodes SET valid_to = ?, superseded_by = ?, status = 'superseded' "
                     "WHERE id = ? AND status = 'active'", (now_ms, theirs[0], mine[0]))
    conn.execute("DELETE FROM meta WHERE key = ?", (f"routine:{old}",))


def drop_duplicates(conn: apsw.Connection, project: str, now_ms: int) -> int:
    """Two active copies of one memory in the project (the same content hash): the oldest stays, the others are
    superseded by it (their ids still expand to it) and whatever pointed at them points at it. Returns how many.
    Verbatim rounds are records of their sessions, not memories: two sessions that said the same words keep both,
    as capture keeps them (``episodes.active_with_hash``: memories only)."""
    groups = conn.execute(
        "SELECT content_hash FROM episodes WHERE project = ? AND status = 'active' AND source_type != 'verbatim' "
        "GROUP BY content_hash HAVING count(*) > 1", (project,)).fetchall()
    dropped = 0
    for (content_hash,) in groups:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM episodes WHERE project = ? AND status = 'active' AND source_type != 'verbatim' "
            "AND content_hash = ? ORDER BY created_at, rowid", (project, content_hash))]
        kept, copies = ids[0], ids[1:]
        for copy in copies:
            conn.execute("UPDATE episodes SET valid_to = ?, superseded_by = ?, status = 'superseded' WHERE id = ?",
                         (now_ms, kept, copy))
            conn.execute("UPDATE failure_signatures SET memory_id = ? WHERE memory_id = ?", (kept, copy))
            conn.execute("UPDATE meta SET value = ? WHERE key LIKE 'routine:%' AND value = ?", (kept, copy))
        dropped += len(copies)
    return dropped


def record_merge(conn: apsw.Connection, merge: Merge, now_ms: int) -> None:
    conn.execute("INSERT INTO project_merges(old, new, merged_at, sessions, memories, duplicates) "
                 "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(old) DO UPDATE SET new = excluded.new, "
                 "merged_at = excluded.merged_at, sessions = sessions + excluded.sessions, "
                 "memories = memories + excluded.memories, duplicates = duplicates + excluded.duplicates",
                 (merge.old, merge.new, now_ms, merge.sessions, merge.memories, merge.duplicates))
