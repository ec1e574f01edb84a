"""Claude Code's auto memory as memories: each section of `<project>/memory/*.md`, with file, heading and lines.

A project's auto-memory folder is read once its project has a captured session (that is how the folder
is tied to a project). Each section (a list item or a paragraph, see `processor.capture.automem`) is
redacted and goes through ADD/UPDATE/NOOP like every other memory, so a fact both extracted from a
transcript and written in MEMORY.md is one memory with two sources. A file is re-read when its size or
mtime changes: new sections are added, moved ones get their new lines, and a removed section's memory
is marked stale (never deleted), unless another source still states it. The file's state (hash, size,
mtime) commits in the same transaction as its memories: a crash re-reads the file, never skips it.
Nothing is ever written to Claude Code's files.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from processor.capture.automem import MemoryFile, Section, cite, memory_files, read_memory_file, sections
from processor.capture.problems import CaptureProblems
from processor.clock import now_ms
from processor.memory.dedupe import Candidate, Outcome
from processor.memory.episode_store import EpisodeStore
from processor.memory.identity import content_hash
from processor.memory.kinds import default_importance
from processor.memory.verbatim import summarize
from processor.redaction import redact
from processor.store import automem as automem_sql
from processor.store import cold as cold_sql
from processor.store import episodes as episodes_sql
from processor.store.automem import FileState, NewSection, SectionRow

log = logging.getLogger(__name__)

SLICE = 16  # new sections embedded and committed per transaction: ~1 s of model time at most
JOB_TYPE = "automem"  # how its stale marks are recorded among the cold path's actions


@dataclass
class SyncReport:
    files_read: int = 0
    added: int = 0      # sections that became new memories
    merged: int = 0     # sections that joined an existing memory (NOOP) or made a new version of one (UPDATE)
    removed: int = 0    # sections gone from their file
    retired: int = 0    # memories marked stale because their only source was removed


def sync_folder(store: EpisodeStore, folder: Path, *, max_bytes: int, problems: CaptureProblems | None = None,
                between: Callable[[], object] | None = None) -> SyncReport:
    """Read a project's auto-memory folder into memories (files unchanged since the last read are skipped).

    New sections are embedded and stored SLICE at a time, `between` called after each slice (the memory
    thread serves waiting recollections there); the file's state commits with the last slice.
    """
    problems = problems if problems is not None else CaptureProblems()
    report = SyncReport()
    project_dir = folder.parent
    real_folder = os.path.realpath(folder)
    if os.path.dirname(real_folder) != os.path.realpath(project_dir):
        problems.report(folder, "automem_outside",
                        f"is a link to {real_folder}, outside its project folder; skipped without reading it")
        return report
    problems.resolve(folder, ["automem_outside"])
    project = automem_sql.project_of_dir(store.conn, str(project_dir))
    if project is None:
        log.debug("auto memory %s: no session of its project captured yet; read later", folder)
        return report
    known = automem_sql.files_in(store.conn, str(folder))
    for path in sorted({str(p) for p in memory_files(folder)} | set(known)):
        state = known.get(path)
        result = read_memory_file(Path(path), folder, max_bytes, problems,
                                  (state.size, state.mtime_ns) if state else None)
        if result.status in ("unchanged", "skipped"):
            continue
        if result.status == "gone" and state is None and not automem_sql.present_sections(store.conn, path):
            continue
        _sync_file(store, path, str(folder), project, result.file, report, between)
    return report


def _sync_file(store: EpisodeStore, path: str, folder: str, project: str, file: MemoryFile | None,
               report: SyncReport, between: Callable[[], object] | None) -> None:
    found: dict[str, tuple[Section, str, str]] = {}  # content hash → (section, redacted text, redacted heading)
    for section in sections(file.lines) if file is not None else []:
        text = redact(section.text)
        found.setdefault(content_hash(text), (section, text, redact(section.heading)))
    removed_before = report.removed
    present = automem_sql.present_sections(store.conn, path)
    new = [(digest, *found[digest]) for digest in found if digest not in present]
    # Earlier slices commit their sections as they go: a crash between two re-reads only what is left.
    slices = [new[start:start + SLICE] for start in range(0, len(new), SLICE)] or [[]]
    for number, part in enumerate(slices, 1):
        if number > 1 and between is not None:
            between()
        candidates = [Candidate(
            summary=f"{cite(path, heading)}: {summarize(text, '')}", full_content=text, entities=[],
            importance=default_importance("other"), kind="other", scope="project", source_type="auto",
            session_id=None, project=project,
        ) for _, _, text, heading in part]
        last = number == len(slices)
        store.add_memories(candidates, linked=lambda conn, outcomes, part=part, last=last: _linked(
            conn, outcomes, path, part, present if last else None, found, folder, project, file, report))
    report.files_read += file is not None
    if new or report.removed > removed_before:
        log.info("auto memory %s: %d new section(s), %d removed", path, len(new), report.removed - removed_before)


def _linked(conn: apsw.Connection, outcomes: list[Outcome], path: str, part: list[tuple[str, Section, str, str]],
            present: dict[str, SectionRow] | None, found: dict[str, tuple[Section, str, str]], folder: str,
            project: str, file: MemoryFile | None, report: SyncReport) -> None:
    """Inside the slice's transaction: where each new section went; with the last slice, moves, removals
    and the file's state."""
    stamp = now_ms()
    automem_sql.add_sections(conn, path, [
        NewSection(digest, heading, section.line_start, section.line_end, outcome.episode_id)
        for (digest, section, _, heading), outcome in zip(part, outcomes, strict=True)], stamp)
    report.added += sum(o.action == "add" for o in outcomes)
    report.merged += sum(o.action != "add" for o in outcomes)
    if present is None:
        return
    gone: list[SectionRow] = []
    for digest, row in present.items():
        if digest not in found:
            gone.append(row)
            continue
        section, _, heading = found[digest]
        if (row.heading, row.line_start, row.line_end) != (heading, section.line_start, section.line_end):
            automem_sql.move_section(conn, row.id, heading, section.line_start, section.line_end)
    automem_sql.remove_sections(conn, [row.id for row in gone], stamp)
    report.retired += sum(_retire(conn, row, stamp) for row in gone)
    report.removed += len(gone)
    if file is None:
        automem_sql.drop_file(conn, path)
    else:
        automem_sql.save_file(conn, FileState(path, file.size, file.mtime_ns, file.sha256), folder, project, stamp)


def _retire(conn: apsw.Connection, row: SectionRow, stamp: int) -> bool:
    """A section left its file: its memory stops being active, unless something else still states it."""
    current = automem_sql.current_version(conn, row.episode_id)
    if current is None or current.status != "active":
        return False
    if current.source_uuids or current.source_type == "manual":
        return False  # also stated in a transcript, or stored on purpose: it holds without the file
    chain = [current.id, *episodes_sql.earlier_versions(conn, current.id)]
    if automem_sql.sections_for(conn, chain):
        return False  # another section (in this file or another) still states it
    reason = f"removed from {cite(row.path, row.heading)} ({row.path}, lines {row.line_start}-{row.line_end})"
    cold_sql.set_status(conn, current.id, "stale", stamp)
    cold_sql.record_check(conn, current.id, stamp, None, "stale", reason)
    cold_sql.record_action(conn, stamp, JOB_TYPE, "stale", episode_id=current.id, detail=reason)
    return True
