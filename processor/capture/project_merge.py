"""Merging what now resolves to one project: the project keys a store holds, named again as capture names them
today (``processor/capture/project.py``), and each key that became another's merged into it.

A store made before projects were known wherever they run holds one project per removed worktree, per clone and
per symlinked folder; a store made since can still gain a merge: a worktree's sessions backfilled before its
repository was seen here, a clone seen after its project, a repository moved away (its project then takes the
root where it is now, so git checks of its memories keep working). Run at each start of the processor and of a
backfill, before capture: nothing to do costs one query and a look at each key's folder.

Each merge is one transaction, recorded in ``project_merges`` with it: sessions, memories, failure signatures,
reviews, sweeps, auto-memory files and remembered roots of the old key become the new key's; a way of failing both
knew is one signature; two active copies of one memory (the same content hash) become one, the other superseded
by it; one close-out routine stays. A crash leaves each merge done or not begun, and the next start plans again
what is left. After a merge commits, the old key's lesson index file goes and an alias sends a hook that still
reads its name to the project's (until the session's next recollection names the project's).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from processor.capture.project import ProjectResolver, write_alias
from processor.clock import now_ms
from processor.files import write_atomic
from processor.hook_kit.hook_io import LESSONS_ALIASES
from processor.hook_kit.project import index_name
from processor.store import projects as projects_sql
from processor.store import write_transaction

TYPE_CHECKING = False
if TYPE_CHECKING:
    import apsw

log = logging.getLogger(__name__)


def _is_folder(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def plan(conn: apsw.Connection, resolver: ProjectResolver) -> dict[str, str]:
    """old key → the key it merges into, for every key the store holds that now names another project.
    Resolving a key remembers what the filesystem shows of it (its root, its remote), as capture would."""
    moves: dict[str, str] = {}
    with write_transaction(conn):
        keys = projects_sql.keys_in_use(conn)
        for key in keys:
            if not key.startswith("/"):
                continue
            project = resolver.resolve(key).project
            if project == key and not _is_folder(key):
                branch = projects_sql.branch_of(conn, key)
                if branch:
                    project = resolver.resolve(key, branch).project
            if project != key:
                moves[key] = project
            elif not _is_folder(key):
                # A repository moved away: its project takes a root of it that is here.
                here = [r.root for r in projects_sql.roots(conn) if r.project == key and r.root != key
                        and _is_folder(r.root)]
                if here:
                    moves[key] = here[0]
    final: dict[str, str] = {}
    for old in moves:
        new, seen = moves[old], {old}
        while new in moves and new not in seen:  # a chain (a → b, b → c) ends where it ends
            seen.add(new)
            new = moves[new]
        if new != old:
            final[old] = new
    return final


def merge(conn: apsw.Connection, old: str, new: str) -> projects_sql.Merge:
    """Everything of project `old` becomes project `new`'s, in one transaction (see the module's docstring)."""
    now = now_ms()
    with write_transaction(conn):
        sessions, memories = projects_sql.move_rows(conn, old, new)
        projects_sql.merge_failures(conn, old, new)
        projects_sql.merge_routines(conn, old, new, now)
        duplicates = projects_sql.drop_duplicates(conn, new, now)
        done = projects_sql.Merge(old, new, sessions, memories, duplicates)
        projects_sql.record_merge(conn, done, now)
    return done


def reconcile(conn: apsw.Connection, resolver: ProjectResolver, lessons_dir: Path | None = None) -> list:
    """Merge every key that now names another project; returns the merges done."""
    done = []
    for old, new in plan(conn, resolver).items():
        merged = merge(conn, old, new)
        done.append(merged)
        log.info("project %s is now part of %s: %s and %s moved, %s superseded", old, new,
                 _count(merged.sessions, "session"), _count(merged.memories, "memory", "memories"),
                 _count(merged.duplicates, "duplicate"))
        if lessons_dir is not None:
            _retire_index(lessons_dir, old, new)
    return done


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _retire_index(lessons_dir: Path, old: str, new: str) -> None:
    """The old key's lesson index goes; a hook still reading its name (a recollection written before the merge, a
    clone's alias) is sent to the new key's."""
    try:
        os.unlink(lessons_dir / index_name(old))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s's lesson index %s: %s", old, lessons_dir / index_name(old), exc)
    write_alias(lessons_dir, old, new)
    aliases = lessons_dir / LESSONS_ALIASES
    try:
        pointing = [entry.path for entry in os.scandir(aliases) if entry.is_file()]
    except OSError:
        return
    for path in pointing:
        try:
            if Path(path).read_text(encoding="utf-8").strip() == index_name(old):
                write_atomic(Path(path), index_name(new).encode())
        except (OSError, UnicodeDecodeError):
            continue
