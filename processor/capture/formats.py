"""What every agent's transcript format gives the tailer: a session's identity, and its lines as capture's objects.

Claude Code, the Codex CLI and the Gemini CLI each write a session as JSON Lines, but in three shapes
(``claude``, ``codex`` and ``gemini`` read them, one module an agent). Each format turns a line into the
objects of ``captured`` — ``CapturedLine`` (conversation text, tool calls, failed results),
``ToolResultsOnly``, ``Skipped`` — plus the two things only the newer formats say: ``Rewind`` (the agent took
its conversation back) and ``TurnEnd`` (the agent marked its turn finished on a line of its own). Everything
downstream of the tailer (episodes, lessons, recollections, the digest, recall) sees the same objects for
every agent. What the formats share is here too: the check that a session ran in Engram's own work directory,
the reader of a format whose lines do not say their session (``SessionReader``), and reading a first line or a
line's JSON.

opencode keeps every session in one SQLite file: its format is a ``SessionDatabase``, whose ``changes`` give the
tailer each session's new rows (``StoredRows``, read by the agent's own cursor) as lines its reader reads, and
whose problems (``DatabaseProblem``) are capture problems. pi writes JSON Lines, one file a session.
"""

from __future__ import annotations

import json
import logging
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Protocol, Self

from processor.capture import captured, signals
from processor.capture.lines import Line
from processor.config import AGENT_NAMES, Settings
from processor.hook_kit.hook_io import CLAUDE, CODEX, COPILOT, GEMINI, OPENCODE, PI, QWEN  # noqa: F401 - each agent
from processor.redaction import Redacted, redact

log = logging.getLogger(__name__)

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
class Queued:
    """What became of a message the user typed while the agent worked (Claude Code's ``queue-operation`` lines,
    ``capture/queued.py``): ``enqueue`` (its text, redacted), ``dequeue``, ``remove`` or ``popAll``."""

    operation: str
    timestamp: str | None
    ts_ms: int | None
    text: Redacted | None = None


@dataclass(frozen=True)
class SessionInfo:
    """Who a transcript file belongs to: its session id, the directory it ran in, and why it is not captured
    at all when it is not (a subagent's file, a session Engram's own LLM jobs ran)."""

    session_id: str
    cwd: str | None = None
    skip: str | None = None


LineOutcome = captured.CapturedLine | captured.ToolResultsOnly | captured.Skipped | Rewind | TurnEnd | Queued


class LineReader(Protocol):
    """Reads one session's lines in order (it may keep what earlier lines said, e.g. the directory). Each reader
    subclasses this, so it has ``superseded`` even when its format never writes a message twice."""

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome: ...

    def superseded(self, raws: list[bytes | None]) -> Collection[int]:
        """The indexes of the lines of a batch that a later line of the batch replaces whole, so they are not read
        at all (a format that writes a message again under its id says which); none by default."""
        return ()


class OwnWorkDir:
    """Engram's agent work directory, as given and with its links resolved (a symlinked ENGRAM_HOME): no agent's
    session that ran there, in it or below it, is captured (they are Engram's own LLM jobs)."""

    def __init__(self, agent_workdir: Path | None) -> None:
        self.paths: tuple[str, ...] = tuple(
            {str(Path(os.path.abspath(agent_workdir))), str(agent_workdir.resolve())}) if agent_workdir else ()

    def session(self, session_id: str, cwd: str | None) -> SessionInfo:
        """The session that ran in `cwd`: not captured when that is the work directory or below it."""
        if cwd and any(cwd == own or cwd.startswith(own.rstrip("/") + "/") for own in self.paths):
            return SessionInfo(session_id, cwd, skip="a session Engram's own LLM jobs ran")
        return SessionInfo(session_id, cwd)


class TranscriptFormat(ABC):
    """An agent's transcripts: where they are, which files are sessions, and how their lines read. Each agent's
    module (``claude``, ``codex``, ``gemini``) holds one subclass, and ``agents.FORMATS`` names them all."""

    agent: str
    depth: int  # path parts below the root down to a transcript file
    report_missing_root = False  # a missing root is a capture problem (Claude Code's), or just an agent not in use
    # Seconds a turn's end must stand with no newer line of the session before its round counts as finished: 0
    # where the agent marks the end itself; more where the end is read from a message that a later line may
    # still continue (the Gemini CLI writes a model message before its tool calls have run).
    turn_end_settle: float = 0.0
    # The names the agent's CLI runs under, where no line of it marks every turn's end: a session whose turn is not
    # over is finished once none of these runs in its folder any more (``capture/agent_process.py``).
    process_names: tuple[str, ...] = ()

    def __init__(self, root: Path, agent_workdir: Path | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        self.own_workdir = OwnWorkDir(agent_workdir)

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: Settings) -> Self | None:
        """The agent's transcripts where the settings say (None: the settings know no folder of the agent's)."""

    @classmethod
    def at(cls, path: Path) -> Self | None:
        """The format rooted where `path` would be one of its session files, if the file's name and folders fit its
        layout (None otherwise): how a file under no captured agent's root (a test's transcript, a benchmark's
        copy) is read by the agent whose layout it has."""
        parents = Path(os.path.abspath(path)).parents
        if len(parents) < cls.depth:
            return None
        fmt = cls(parents[cls.depth - 1])
        return fmt if fmt.in_layout(path) else None

    @abstractmethod
    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        """Whether the folder `parts` below the root may hold sessions (the walk goes into it)."""

    @abstractmethod
    def wants_file(self, parts: tuple[str, ...]) -> bool:
        """Whether the file `parts` below the root (as deep as `depth`) is a session to capture."""

    def accepts(self, path: Path) -> bool:
        """Whether `path` is one of the format's session files, from the path alone."""
        try:
            parts = Path(os.path.abspath(path)).relative_to(self.root).parts
        except ValueError:
            return False
        if len(parts) != self.depth:
            return False
        return all(self.wants_dir(parts[:i]) for i in range(1, self.depth)) and self.wants_file(parts)

    def in_layout(self, path: Path) -> bool:
        """Whether `path`, below this root, has the name and folders of the format's session files: those it
        captures, unless the format says otherwise."""
        return self.accepts(path)

    def transcript_of(self, path: Path) -> Path | None:
        """The session file a changed file belongs to (a watch event's path): the file itself when it is one of the
        format's (opencode's database is written through its ``-wal`` file)."""
        return path if self.accepts(path) else None

    def last_modified(self, path: str, st: os.stat_result) -> float:
        """When the session file last changed (its mtime; opencode's database: its write-ahead log's too)."""
        return st.st_mtime

    @abstractmethod
    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """Whose session the open file is (None while its first line, the header, is still being written)."""

    @abstractmethod
    def reader(self, info: SessionInfo) -> LineReader:
        """A reader of the session's lines, from its first on."""


class SessionReader(LineReader):
    """A reader of a format whose lines do not say their session (the Codex CLI's, the Gemini CLI's): the file's
    first line does, so the session's id and directory are kept here and set on every line captured. Neither such
    format records a parent message or a git branch."""

    def __init__(self, info: SessionInfo) -> None:
        self.session_id = info.session_id
        self.cwd: Redacted | None = redact(info.cwd) if info.cwd else None  # captured text: through the door once

    def line(self, uuid: str, role: str, timestamp: str | None, text: Redacted, *,
             api_message_id: str | None = None,
             tool_uses: tuple[tuple[str, signals.PendingSignal], ...] = (),
             tool_results: tuple[captured.ToolResult, ...] = (),
             tool_calls: tuple[captured.ToolCall, ...] = (),
             failures: tuple[captured.ToolFailure, ...] = (),
             replaces: bool = False, end_turn: bool = False, ts_ms: int | None = None) -> captured.CapturedLine:
        """One captured line of this session (`end_turn`: the agent's answer that ends its turn; `ts_ms`: its
        time when the format says it in milliseconds)."""
        return captured.CapturedLine(
            uuid=uuid, session_id=self.session_id, parent_uuid=None, role=role, timestamp=timestamp,
            ts_ms=captured.timestamp_ms(timestamp) if ts_ms is None else ts_ms, cwd=self.cwd, git_branch=None,
            text=text, api_message_id=api_message_id, tool_uses=tool_uses, tool_results=tool_results,
            tool_calls=tool_calls, failures=failures, replaces=replaces, end_turn=end_turn)

    def results_only(self, uuid: str, timestamp: str | None, results: tuple[captured.ToolResult, ...],
                     failures: tuple[captured.ToolFailure, ...], ts_ms: int | None = None
                     ) -> captured.ToolResultsOnly:
        """A line of this session with no conversation text that carries tool results."""
        return captured.ToolResultsOnly(uuid, self.session_id,
                                        captured.timestamp_ms(timestamp) if ts_ms is None else ts_ms, results,
                                        failures)


@dataclass(frozen=True)
class StoredRows:
    """What is new in one session of an agent that keeps its sessions in a database (opencode's SQLite): its rows
    after the session's cursor, each as a line its format's reader reads (``Line.offset``: the row's own cursor,
    ``end``: the cursor past it), and the cursor past the last of them (committed with them)."""

    info: SessionInfo
    rows: list[Line]
    end: int


class DatabaseProblem(Exception):
    """A database of sessions that cannot be read now (`kind`: ``cannot_read``, ``unknown_schema``): a capture
    problem, reported once and looked at again at the next change."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class SessionDatabase(TranscriptFormat):
    """An agent whose sessions are rows of one database file, not a file each (opencode's ``opencode.db``): the
    tailer reads what is new in each session by the agent's own cursor, never the file's bytes, and commits that
    cursor with the rows (``sessions.byte_offset`` holds it; ``inode`` the database file's)."""

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        raise TypeError(f"{path} is a database of sessions: its sessions are read with changes()")

    @abstractmethod
    def ends(self, path: Path) -> dict[str, int]:
        """Each session's cursor past its newest row (what `engram status` compares the captured cursor with)."""

    @abstractmethod
    def changes(self, path: Path, cursors: dict[str, int], since_ms: int | None,
                batch_bytes: int) -> Iterator[StoredRows]:
        """The sessions with rows past their cursor (`cursors`: session id → the cursor captured so far; a session
        not in it is read from its first row when it changed since `since_ms`, None: any), at most about
        `batch_bytes` of rows a batch. Raises ``apsw.BusyError`` when the database stays locked (retried)."""


class MessageCalls:
    """The tool calls of one assistant message as capture keeps them, added one by one under Claude Code's names:
    the line's note of each (``notes``), what each works on (``calls``), and the high-signal ones whose result a
    signal awaits (``uses``: a commit message, a closing comment)."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.calls: list[captured.ToolCall] = []
        self.uses: list[tuple[str, signals.PendingSignal]] = []

    def add(self, tool_use_id: str, name: str, tool_input: dict) -> None:
        self.notes.append(tool_note(name, tool_input))
        self.calls.append(captured.ToolCall(tool_use_id, name, captured.tool_target(tool_input)))
        pending = signals.from_tool_use(name, tool_input)
        if pending is not None:  # a commit or tracker text: redacted like every captured text
            self.uses.append((tool_use_id, replace(pending, text=redact(pending.text))))


def tool_note(name: str, tool_input: dict) -> str:
    """A tool call as the line's text notes it: its tool, and the file it works on when it names one."""
    path = tool_input.get("file_path")
    return f"[tool: {name} {path}]" if isinstance(path, str) and path else f"[tool: {name}]"


def loads_line(raw: bytes) -> dict | captured.Skipped:
    """A line's JSON object, or the Skipped that says why there is none. NUL bytes (a hole a crash left in the
    file) are taken out and the line read again; bytes that are not UTF-8 are replaced, the rest is kept."""
    try:
        return _object(json.loads(raw))
    except UnicodeDecodeError:
        raw = raw.decode("utf-8", errors="replace").encode()
    except (ValueError, RecursionError) as exc:
        if not raw.strip():
            return captured.Skipped("blank line")
        if b"\x00" not in raw:
            return captured.Skipped(f"invalid JSON ({str(exc)[:200]})", problem=True)
    try:
        return _object(json.loads(raw.replace(b"\x00", b"")))
    except (ValueError, RecursionError) as exc:
        return captured.Skipped(f"invalid JSON ({str(exc)[:200]})", problem=True)


def _object(value: object) -> dict | captured.Skipped:
    if isinstance(value, dict):
        return value
    return captured.Skipped(f"JSON line is a {type(value).__name__}, not an object", problem=True)


def first_line(f: BinaryIO, limit: int = HEADER_LIMIT) -> bytes | None:
    """The file's first complete line (without its newline), or None while it is still being written."""
    data = os.pread(f.fileno(), min(limit, 65536), 0)
    end = data.find(b"\n")
    if end < 0 and len(data) == 65536:
        data = os.pread(f.fileno(), limit, 0)
        end = data.find(b"\n")
    return data[:end] if end >= 0 else None


_unknown: dict[str, Counter[str]] = {}


def first_record(f: BinaryIO) -> dict | None:
    """The file's first line (a session's header) as a JSON object: {} when it is damaged or no object (the session
    is still captured, line by line), None while it is still being written."""
    head = first_line(f)
    if head is None:
        return None
    try:
        record = json.loads(head)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def skip_unknown(agent: str, kind: str) -> captured.Skipped:
    """A record type a newer CLI added: skipped and counted (``unknown_records``), each type logged once."""
    kind = kind[:60]
    counts = _unknown.setdefault(agent, Counter())
    counts[kind] += 1
    if counts[kind] == 1:
        log.info("%s: record type %r is not known to this Engram; skipped (and counted in engram status)",
                 AGENT_NAMES.get(agent, agent), kind)
    return captured.Skipped(f"unknown {agent} record type {kind!r}")


def unknown_records() -> dict[str, dict[str, int]]:
    """Per agent, the record types skipped as unknown since this process started, with their counts."""
    return {agent: dict(counts) for agent, counts in sorted(_unknown.items()) if counts}
