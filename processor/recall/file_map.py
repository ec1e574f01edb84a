"""The files each project's sessions worked on, by file name: where the failure hook finds a missed path's file.

When a call fails on a path that is not there (a Read's "File does not exist.", ``cat``'s "No such file or
directory"), the project often has a file of that name elsewhere, one an earlier session read or changed: the
phase's plan in the folder the planner really made, the component in ``file-browser/`` not ``files/``. The failure
hook (``recall_hook/tool_failure.py``, ``processor/hook_kit/where_files.py``) tells where it is, and it cannot
search the store, so the processor keeps, beside each project's lesson index, ``<index name>.paths``: its first
line a JSON object saying whose it is, then one line per file name (a JSON string, a tab, the JSON list of the
files of that name: ``[path below the project's folder, the day it was last worked on, the first session that
did]``), the most recently worked on first; one line per number that starts folder names (``"12/"``: the
folders whose name begins with ``12-``); and one line per git branch stem and number the sessions worked on
(``"branch:feat/phase-12"``: ``processor/hook_kit/branches.py``, told before a call makes a branch of that number
under another name). ASCII only; the hook finds the one line it needs with a text search.

Written when the project's sessions made new tool calls, at the next user message (after the session's
recollection file): for another session than the last one it was written for, or a minute later.
Files outside the project's folder are left out (a scratch file in ``/tmp``), and so are names without an
extension (a folder, a program): only what ``where_files.file_name`` looks up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from processor.clock import now_ms, utc_date
from processor.files import ensure_private_dir, write_atomic
from processor.hook_kit import hook_io
from processor.hook_kit.branches import PREFIX, branch_key
from processor.hook_kit.project import index_name
from processor.hook_kit.where_files import file_name, folder_key, named_folder_key, relative
from processor.store import projects as projects_sql
from processor.store import tool_calls as tool_calls_sql

SCANNED = 20_000  # (file, session) rows read, the newest first
PATHS_PER_NAME = 5
FOLDERS_PER_KEY = 12  # `01/`: the first phase, the first migration, … of several parents
BRANCHES_PER_KEY = 5
LIMIT = hook_io.PATHS_LIMIT
WORKED_ON = hook_io.READING + hook_io.EDITING
REFRESH_SECONDS = 60


def files_by_name(rows: list[tuple[str, str, int]], root: str | None) -> dict[str, list[list[str]]]:
    """Each file name's files, each numbered folder name's folders (under ``folder_key``) and each other folder's
    (under ``named_folder_key``), from `rows` (path, session, newest call; the newest first), as the map keeps
    them: [path, last day, first session]."""
    seen: dict[str, list] = {}  # path as called → [newest call, the oldest session that worked on it]
    for target, session_id, last_ms in rows:
        entry = seen.get(target)
        if entry is None:
            seen[target] = [last_ms, session_id]
        else:
            entry[1] = session_id  # an older session worked on it too: the first is the oldest
    files: dict[str, list] = {}  # path below the root → [newest call, first session]
    folders: dict[str, list] = {}  # the same, of the numbered folders they are in
    for target, (last_ms, first) in seen.items():
        path = relative(target, root)
        if path.startswith(("/", "~", "../")) or not path or path in files:
            continue  # outside the project's folder, or the same file called by another path
        files[path] = [last_ms, first]
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            known = folders.setdefault(folder, [last_ms, first])
            if last_ms > known[0]:
                known[0] = last_ms
    by_name: dict[str, list[list[str]]] = {}
    for entries, key_of, most in ((files, file_name, PATHS_PER_NAME),
                                  (folders, lambda p: folder_key(p.rpartition("/")[2]), FOLDERS_PER_KEY),
                                  (folders, lambda p: named_folder_key(p.rpartition("/")[2]), PATHS_PER_NAME)):
        for path, (last_ms, first) in sorted(entries.items(), key=lambda item: -item[1][0]):
            key = key_of(path)
            if key is not None and len(named := by_name.setdefault(key, [])) < most:
                named.append([path, utc_date(last_ms) if last_ms else "", first])
    return by_name


def branches_by_key(rows: list[tuple[str, str, int]]) -> dict[str, list[list[str]]]:
    """Each branch key's branches (``branches.branch_key``: ``branch:feat/phase-12``), from `rows` (branch, session,
    newest message; the newest first), as the map keeps them: [branch, last day, first session]. Not a branch left
    for another of its key in every session that worked on it, which more sessions worked on (cipher-box's
    `feat/phase-12-mfa`, made by mistake and deleted minutes later for `feat/phase-12-multi-factor`): that one is
    the project's."""
    seen: dict[str, list] = {}  # branch → [newest message, the oldest session on it]
    sessions: dict[str, set[str]] = {}
    for branch, session_id, last_ms in rows:
        entry = seen.setdefault(branch, [last_ms, session_id])
        entry[1] = session_id
        sessions.setdefault(branch, set()).add(session_id)
    keys = {branch: branch_key(branch) for branch in seen}

    def left(branch: str) -> bool:
        return any(other != branch and keys[other] == keys[branch] and sessions[branch] <= sessions[other]
                   and len(sessions[other]) > len(sessions[branch]) for other in seen)

    by_key: dict[str, list[list[str]]] = {}
    for branch, (last_ms, first) in seen.items():
        key = keys[branch]
        if key is not None and not left(branch) and len(named := by_key.setdefault(PREFIX + key, [])) \
                < BRANCHES_PER_KEY:
            named.append([branch, utc_date(last_ms) if last_ms else "", first])
    return by_key


def map_text(project: str | None, root: str | None, by_name: dict[str, list[list[str]]]) -> str:
    """The file's text: its header, then a line per file name while it stays under ``LIMIT`` bytes."""
    lines = [json.dumps({"project": project, "root": root, "at": now_ms()})]
    size = len(lines[0]) + 1
    for name, entries in by_name.items():
        line = f"{json.dumps(name)}\t{json.dumps(entries)}"
        size += len(line) + 1
        if size > LIMIT:
            break  # the files worked on longest ago are left out
        lines.append(line)
    return "\n".join(lines) + "\n"


class FileMap:
    """Writes each project's ``.paths`` file beside its lesson index, when its sessions made new calls."""

    def __init__(self, recollections_dir: Path) -> None:
        self.folder = recollections_dir / hook_io.LESSONS_FOLDER
        self._stamps: dict[str | None, tuple] = {}  # project → (its calls' stamp, the session, when) written

    def path(self, project: str | None) -> Path:
        return self.folder / (index_name(project)[:-len(hook_io.LESSONS_SUFFIX)] + hook_io.PATHS_SUFFIX)

    def refresh(self, conn, project: str | None, root: str | None, session_id: str | None = None) -> Path:
        """Write the project's map when its sessions made calls since, for another session than the last one it
        was written for or ``REFRESH_SECONDS`` later: a session is told where earlier sessions' files are, so its
        own calls need not rewrite the map at each of its messages (a big project's map takes a fraction of a
        second)."""
        path = self.path(project)
        stamp = tool_calls_sql.calls_stamp(conn, project)
        written = self._stamps.get(project)
        if written is not None and path.exists() and (written[0] == stamp or (
                written[1] == session_id and time.monotonic() - written[2] < REFRESH_SECONDS
                and stamp[1] >= written[0][1])):  # a session's calls dropped (off the record): written now
            return path
        rows = tool_calls_sql.files_worked_on(conn, project, WORKED_ON, SCANNED)
        named = files_by_name(rows, root)
        named.update(branches_by_key(projects_sql.branches_worked_on(conn, project, SCANNED)))
        ensure_private_dir(self.folder.parent)
        ensure_private_dir(self.folder)
        write_atomic(path, map_text(project, root, named))
        self._stamps[project] = (stamp, session_id, time.monotonic())
        if len(self._stamps) > 1_000:  # one entry per project: only a store of many projects trims it
            self._stamps.pop(next(iter(self._stamps)))
        return path
