"""The SQL for Claude Code's auto memory: each file's last-read state and the sections memories came from.

Callers own the transaction; these functions only run statements.
"""

from __future__ import annotations

from typing import NamedTuple

import apsw

from processor.redaction import Redacted, redacted
from processor.store.episodes import EPISODE_COLUMNS, Episode


class FileState(NamedTuple):
    path: str
    size: int
    mtime_ns: int
    sha256: str


class SectionRow(NamedTuple):
    id: int
    path: str
    section_hash: str
    heading: str
    line_start: int
    line_end: int
    episode_id: str
    state: str = "present"


class NewSection(NamedTuple):
    section_hash: str
    heading: Redacted
    line_start: int
    line_end: int
    episode_id: str


def project_of_dir(conn: apsw.Connection, project_dir: str) -> str | None:
    """The project of the newest captured session whose transcript lies directly in `project_dir`."""
    prefix = project_dir.rstrip("/") + "/"
    row = conn.execute(
        "SELECT project FROM sessions WHERE substr(transcript_path, 1, length(?)) = ? AND project IS NOT NULL "
        "AND instr(substr(transcript_path, length(?) + 1), '/') = 0 ORDER BY updated_at DESC LIMIT 1",
        (prefix, prefix, prefix)).fetchone()
    return row[0] if row else None


def files_in(conn: apsw.Connection, folder: str) -> dict[str, FileState]:
    rows = conn.execute("SELECT path, size, mtime_ns, sha256 FROM automem_files WHERE folder = ?", (folder,))
    return {row[0]: FileState(*row) for row in rows}


def save_file(conn: apsw.Connection, state: FileState, folder: str, project: str | None, now_ms: int) -> None:
    conn.execute(
        "INSERT INTO automem_files(path, folder, project, size, mtime_ns, sha256, read_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(path) DO UPDATE SET folder = excluded.folder, project = excluded.project, size = excluded.size, "
        "mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, read_at = excluded.read_at",
        (state.path, folder, project, state.size, state.mtime_ns, state.sha256, now_ms))


def drop_file(conn: apsw.Connection, path: str) -> None:
    """The file is gone: forget its state (its sections are marked removed separately)."""
    conn.execute("DELETE FROM automem_files WHERE path = ?", (path,))


def present_sections(conn: apsw.Connection, path: str) -> dict[str, SectionRow]:
    rows = conn.execute(
        "SELECT id, path, section_hash, heading, line_start, line_end, episode_id, state FROM automem_sections "
        "WHERE path = ? AND state = 'present'", (path,))
    return {row[2]: SectionRow(*row) for row in rows}


def add_sections(conn: apsw.Connection, path: str, sections: list[NewSection], now_ms: int) -> None:
    conn.executemany(
        "INSERT INTO automem_sections(path, section_hash, heading, line_start, line_end, episode_id, added_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(path, s.section_hash, redacted(s.heading), s.line_start, s.line_end, s.episode_id, now_ms)
         for s in sections])


def move_section(conn: apsw.Connection, section_id: int, heading: Redacted, line_start: int, line_end: int) -> None:
    """The same text, now under another heading or at other lines."""
    conn.execute("UPDATE automem_sections SET heading = ?, line_start = ?, line_end = ? WHERE id = ?",
                 (redacted(heading), line_start, line_end, section_id))


def remove_sections(conn: apsw.Connection, section_ids: list[int], now_ms: int) -> None:
    conn.executemany("UPDATE automem_sections SET state = 'removed', removed_at = ? WHERE id = ?",
                     [(now_ms, i) for i in section_ids])


def current_version(conn: apsw.Connection, episode_id: str) -> Episode | None:
    """The newest version of a memory: `superseded_by` followed to its end."""
    row = conn.execute(
        f"""
        WITH RECURSIVE newer(id, depth) AS (
            SELECT ?, 0
            UNION SELECT e.superseded_by, newer.depth + 1 FROM episodes e JOIN newer ON e.id = newer.id
            WHERE e.superseded_by IS NOT NULL AND newer.depth < 1000
        )
        SELECT {EPISODE_COLUMNS} FROM episodes WHERE id = (SELECT id FROM newer ORDER BY depth DESC LIMIT 1)
        """, (episode_id,)).fetchone()
    return Episode.from_row(row) if row else None


def sections_for(conn: apsw.Connection, episode_ids: list[str], *, present_only: bool = True) -> list[SectionRow]:
    """The sections (by default only those still in their files) that were sources of any of these memories."""
    if not episode_ids:
        return []
    marks = ",".join("?" * len(episode_ids))
    present = " AND state = 'present'" if present_only else ""
    rows = conn.execute(
        f"SELECT id, path, section_hash, heading, line_start, line_end, episode_id, state FROM automem_sections "
        f"WHERE episode_id IN ({marks}){present} ORDER BY state, path, line_start", episode_ids)
    return [SectionRow(*row) for row in rows]
