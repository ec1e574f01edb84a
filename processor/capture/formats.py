"""What every agent's transcript format gives the tailer: a session's identity, and its lines as capture's objects.

Claude Code, the Codex CLI and the Gemini CLI each write a session as JSON Lines, but in three shapes
(``parse`` reads Claude Code's, ``codex`` and ``gemini`` the others). Each format turns a line into the
objects capture already knows — ``CapturedLine`` (conversation text, tool calls, failed results),
``ToolResultsOnly``, ``Skipped`` — plus the two things only the newer formats say: ``Rewind`` (the agent took
its conversation back) and ``TurnEnd`` (the agent marked its turn finished on a line of its own). Everything
downstream of the tailer (episodes, lessons, recollections, the digest, recall) sees the same objects for
every agent.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from processor.capture.parse import CapturedLine, Skipped, ToolResultsOnly, parse_line
from processor.config import AGENT_NAMES, AGENTS

log = logging.getLogger(__name__)

CLAUDE, CODEX, GEMINI = AGENTS
# How far into a transcript its first line (a session header) is looked for.
HEADER_LIMIT = 1 << 20


@dataclass(frozen=True)
class Rewind:
    """The agent took its conversation back to just before message `uuid` (the Gemini CLI's ``$rewindTo``):
    that message and every later one are no longer part of the session."""

    uuid: str


@dataclass(frozen=True)
class TurnEnd:
    """The agent marked its turn finished on a line of its own (the Codex CLI's ``task_complete``)."""


@dataclass(frozen=True)
class SessionInfo:
    """Who a transcript file belongs to: its session id, the directory it ran in, and why it is not captured
    at all when it is not (a subagent's file, a session Engram's own LLM jobs ran)."""

    session_id: str
    cwd: str | None = None
    skip: str | None = None


LineOutcome = CapturedLine | ToolResultsOnly | Skipped | Rewind | TurnEnd


class LineReader(Protocol):
    """Reads one session's lines in order (it may keep what earlier lines said, e.g. the directory). A reader
    may also say, of a batch of lines, which ones a later line of the batch replaces whole (``superseded``:
    the indexes of those lines), so they are not read at all."""

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome: ...


class TranscriptFormat(Protocol):
    """An agent's transcripts: where they are, which files are sessions, and how their lines read."""

    agent: str
    root: Path
    depth: int  # path parts below the root down to a transcript file
    report_missing_root: bool  # a missing root is a capture problem (Claude Code's), or just an agent not in use

    def wants_dir(self, parts: tuple[str, ...]) -> bool: ...

    def wants_file(self, parts: tuple[str, ...]) -> bool: ...

    def accepts(self, path: Path) -> bool: ...

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None: ...

    def reader(self, info: SessionInfo) -> LineReader: ...


class ClaudeReader:
    """Claude Code's lines (``parse.parse_line``): each line stands on its own."""

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        return parse_line(raw, awaited)


def relative_parts(root: Path, path: Path) -> tuple[str, ...] | None:
    import os

    try:
        return Path(os.path.abspath(path)).relative_to(root).parts
    except ValueError:
        return None


def accepts_path(fmt: TranscriptFormat, path: Path) -> bool:
    """Whether `path` is one of the format's session files, from the path alone."""
    parts = relative_parts(fmt.root, path)
    if parts is None or len(parts) != fmt.depth:
        return False
    return all(fmt.wants_dir(parts[:i]) for i in range(1, fmt.depth)) and fmt.wants_file(parts)


def loads_line(raw: bytes) -> object:
    """A line's JSON value, or the Skipped that says why there is none. NUL bytes (a hole a crash left in the
    file) are taken out and the line read again; bytes that are not UTF-8 are replaced, the rest is kept."""
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raw = raw.decode("utf-8", errors="replace").encode()
    except (ValueError, RecursionError) as exc:
        if not raw.strip():
            return Skipped("blank line")
        if b"\x00" not in raw:
            return Skipped(f"invalid JSON ({str(exc)[:200]})", problem=True)
    try:
        return json.loads(raw.replace(b"\x00", b""))
    except (ValueError, RecursionError) as exc:
        return Skipped(f"invalid JSON ({str(exc)[:200]})", problem=True)


def first_line(f: BinaryIO, limit: int = HEADER_LIMIT) -> bytes | None:
    """The file's first complete line (without its newline), or None while it is still being written."""
    import os

    data = os.pread(f.fileno(), min(limit, 65536), 0)
    end = data.find(b"\n")
    if end < 0 and len(data) == 65536:
        data = os.pread(f.fileno(), limit, 0)
        end = data.find(b"\n")
    return data[:end] if end >= 0 else None


_unknown: dict[str, Counter[str]] = {}


def skip_unknown(agent: str, kind: str) -> Skipped:
    """A record type a newer CLI added: skipped and counted (``unknown_records``), each type logged once."""
    kind = kind[:60]
    counts = _unknown.setdefault(agent, Counter())
    counts[kind] += 1
    if counts[kind] == 1:
        log.info("%s: record type %r is not known to this Engram; skipped (and counted in engram status)",
                 AGENT_NAMES.get(agent, agent), kind)
    return Skipped(f"unknown {agent} record type {kind!r}")


def unknown_records() -> dict[str, dict[str, int]]:
    """Per agent, the record types skipped as unknown since this process started, with their counts."""
    return {agent: dict(counts) for agent, counts in sorted(_unknown.items()) if counts}
