"""Which project a session's folder belongs to, wherever the session ran: the main checkout, a worktree (alive or
removed since), a clone in another folder, a symlink to the repository.

The project's key is a root path: the root of the repository first seen for it on this machine. Every table that
names a project (sessions, memories, failures, the lesson index's file name, the digest's queries) holds that key,
and shared memory maps it to the repository's remote across machines (``processor/share/projects.py``).

- A folder that exists: its repository's root (``processor/hook_kit/project.py``, the same function the hooks
  call) is looked up in the store. A root seen before keeps its project; a new root whose remote (normalised,
  ``processor/hook_kit/remotes.py``) is a known project's is a clone and joins that project; else the root is a
  project of its own. The folder, its checkout's top folder and the root are remembered, in the transaction of
  the lines that named the folder (``processor/store/projects.py``).
- A folder that is gone: the project it had when it was seen alive (the folder, or a checkout that held it), else
  the repository it was a worktree of (the kit's ``vanished_root``: git's worktree list, the worktree layouts,
  the session's branch, among the repositories seen alive here), else it is its own project, as it always was.

A repository without a remote is known by its path only: a copy elsewhere is another project. Two repositories
with the same folder name are never one project unless their remote is the same.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from processor.clock import now_ms
from processor.files import ensure_private_dir, write_atomic
from processor.hook_kit import project as kit
from processor.hook_kit.hook_io import LESSONS_ALIASES
from processor.hook_kit.remotes import remote_key
from processor.redaction import redact
from processor.store import projects as projects_sql

TYPE_CHECKING = False
if TYPE_CHECKING:
    import apsw

log = logging.getLogger(__name__)

# The hooks' function, cached: a folder's root is read from the filesystem once a process.
project_root = functools.lru_cache(maxsize=4096)(kit.project_root)

_FOLDERS_CACHED = 4096


@dataclass(frozen=True)
class Sighting:
    """What the filesystem says of an existing folder: its repository's root (the folder itself outside any), the
    top folder of its checkout (None outside any repository: no folder below it is known by it) and the
    repository's remote key."""

    root: str
    checkout: str | None
    remote: str | None


@dataclass(frozen=True)
class Place:
    """Where a session's folder is: its project's key, and the checkout it is in (its worktree's or clone's top
    folder; None outside any repository, or when the folder is gone)."""

    project: str
    checkout: str | None


def sighting(folder: str, known: tuple[str, ...] = ()) -> Sighting:
    """An existing folder as the filesystem shows it (a symlink read as the folder it links to)."""
    real = os.path.realpath(folder)
    found = kit.locate(real)
    if found is None:
        return Sighting(real, None, None)
    root, top, common = found
    if common is None:
        # A worktree whose repository was moved: the known repository that still lists it, else where it was.
        moved = kit.project_root(real, None, known)
        located = kit.locate(moved) if os.path.isdir(moved) else None
        if located is not None and located[2] is not None:
            root, common = located[0], located[2]
    return Sighting(root, top, remote_key(common))


class ProjectResolver:
    """Names the project of a session's folder, and remembers what it saw (see the module's docstring).

    One per connection (capture's tailer, a backfill's, a replay's). ``resolve`` records in the caller's write
    transaction; ``lookup`` only reads. `aliases_dir`: the lesson indexes' folder, where a clone's root gets the
    alias a hook follows to its project's index before the session's first recollection.
    """

    def __init__(self, conn: apsw.Connection, aliases_dir: Path | None = None) -> None:
        self.conn = conn
        self.aliases_dir = aliases_dir
        self._sightings: dict[str, Sighting] = {}  # existing folder → what it was when first read
        # (folder gone, branch, the roots known then) → its repository's root: a backfill reads a session's lines
        # in many batches, and the signs are read once for them (again once a new root is known).
        self._vanished: dict[tuple[str, str | None, tuple[str, ...]], str | None] = {}
        self._aliased: set[str] = set()

    def _known(self) -> tuple[str, ...]:
        return tuple(projects_sql.known_roots(self.conn))

    def _sighting(self, folder: str) -> Sighting:
        found = self._sightings.get(folder)
        if found is None:
            if len(self._sightings) >= _FOLDERS_CACHED:
                self._sightings.clear()
            found = self._sightings[folder] = sighting(folder, self._known())
        return found

    def resolve(self, cwd: str, branch: str | None = None) -> Place:
        """The project of `cwd`, remembering it when it exists (call within the write transaction of the lines
        that named it: what they resolved to and what is remembered commit together)."""
        return self._place(cwd, branch, record=True)

    def lookup(self, cwd: str, branch: str | None = None) -> Place:
        """The project of `cwd`, as ``resolve`` names it, writing nothing."""
        return self._place(cwd, branch, record=False)

    def _place(self, cwd: str, branch: str | None, record: bool) -> Place:
        if not cwd.startswith("/"):
            return Place(cwd, None)
        try:
            alive = os.path.isdir(cwd)
        except (OSError, ValueError):
            return Place(cwd, None)
        if alive:
            seen = self._sighting(cwd)
            project = self._project_of_root(seen.root, seen.remote)
            if record:
                now = now_ms()
                project = projects_sql.add_root(self.conn, seen.root, project,
                                                redact(seen.remote) if seen.remote else None, now)
                projects_sql.add_path(self.conn, cwd, seen.root, cwd == seen.checkout, now)
                if seen.checkout is not None and seen.checkout != cwd:
                    projects_sql.add_path(self.conn, seen.checkout, seen.root, True, now)
                self._alias(seen.root, project)
            return Place(project, seen.checkout)
        remembered = projects_sql.project_of_path(self.conn, cwd)
        if remembered is not None:
            return Place(remembered, None)
        known = self._known()
        key = (cwd, branch, known)
        if key not in self._vanished:
            if len(self._vanished) >= _FOLDERS_CACHED:
                self._vanished.clear()
            self._vanished[key] = kit.vanished_root(cwd, branch, known)
        root = self._vanished[key]
        if root is None:
            return Place(cwd, None)  # nothing says where it was: its own project, as it always was
        seen = self._sighting(root)
        project = self._project_of_root(seen.root, seen.remote)
        if record:
            project = projects_sql.add_root(self.conn, seen.root, project,
                                            redact(seen.remote) if seen.remote else None, now_ms())
            self._alias(seen.root, project)
        return Place(project, None)

    def _project_of_root(self, root: str, remote: str | None) -> str:
        return (projects_sql.project_of_root(self.conn, root)
                or (projects_sql.project_of_remote(self.conn, remote) if remote else None)
                or projects_sql.project_of_path(self.conn, root)  # a root remembered as a folder (moved since)
                or root)

    def _alias(self, root: str, project: str) -> None:
        """A root that is not its project's key (a clone): leave the alias the hooks follow to the project's
        lesson index (written once a process; a file, so it survives a transaction that is rolled back)."""
        if self.aliases_dir is None or root == project or root in self._aliased:
            return
        self._aliased.add(root)
        write_alias(self.aliases_dir, root, project)


def write_alias(lessons_dir: Path, root: str, project: str) -> None:
    """``<lessons>/aliases/<index of root>`` holds the name of `project`'s index: a hook that finds no index for
    its folder's root reads that one (``hook_io.read_filed``)."""
    folder = lessons_dir / LESSONS_ALIASES
    try:
        ensure_private_dir(lessons_dir)
        ensure_private_dir(folder)
        write_atomic(folder / kit.index_name(root), kit.index_name(project).encode())
    except OSError as exc:
        log.warning("cannot write the lesson index alias of %s in %s (%s): a hook there finds the project's "
                    "lessons only after the session's first prompt", root, folder, exc.strerror or exc)


def known_project(conn: apsw.Connection, root: str) -> str:
    """The project a root the kit computed belongs to (a clone's root: its project's key), else the root."""
    return projects_sql.project_of_root(conn, root) or projects_sql.project_of_path(conn, root) or root


def project_of_folder(db_path: Path, folder: str) -> str:
    """The project of a folder a person works in (``engram remember`` in a clone, ``engram share project``, the
    MCP server's folder), as capture names it: read from the store when there is one, else the folder's root."""
    from processor.store.connection import connect  # here: the kit's answer needs no database driver

    root = project_root(os.path.abspath(folder))
    if not db_path.exists():
        return root
    try:
        conn = connect(db_path, readonly=True)
    except Exception:  # not an Engram database, unreadable: the root is still the right name in most cases
        return root
    try:
        return ProjectResolver(conn).lookup(os.path.abspath(folder)).project
    except Exception:  # a store not migrated yet (no project tables)
        return root
    finally:
        conn.close()
