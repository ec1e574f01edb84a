"""opencode's sessions: where its database is, which of its sessions are new, and what each of its events means.

opencode keeps every session in one SQLite file, ``<data dir>/opencode.db`` (``$XDG_DATA_HOME/opencode``, else
``~/.local/share/opencode``; a build of another release channel writes ``opencode-<channel>.db``), in WAL mode:
its tables ``session`` (one row a session: ``directory`` is its cwd, ``parent_id`` a subagent's parent),
``message`` and ``part`` (rows written again and again as they change) and ``event``, an insert-only log of
every change — ``(aggregate_id, seq)``, seq 0, 1, 2… per session, each row the whole message or part as it then
was. So a session is read by that cursor, through SQLite (``processor/store/opencode.py``; never by copying the
file, whose write-ahead log holds the newest rows), and each event becomes a line for the tailer:
``{"type": <event type>, "data": <its JSON>}``.

What the events mean:

- ``message.updated.1``: a message's ``info`` (``role``: ``user`` or ``assistant``, one assistant message a
  model step); nothing to store, its role is kept for its parts;
- ``message.part.updated.1``: a part as it now is. A ``text`` part of the user's message is the prompt (parts
  marked ``synthetic`` were added by a plugin: Engram's digest among them, never captured); an assistant's
  ``text`` part is final once its ``time.end`` is set; a ``tool`` part once its ``state.status`` is
  ``completed`` or ``error`` — a shell command that exited non-zero is ``completed`` with ``metadata.exit`` ≠ 0,
  a tool that threw is ``error`` with ``state.error``; what Engram's plugin appended to a result (its fence) is
  never part of the failure kept (``metadata.output`` holds the command's own output). ``step-finish`` with
  ``reason: "stop"`` ends the turn (``TurnEnd``);
- ``session.*``: the session's row (title, tokens), ``message.removed`` / ``message.part.removed`` (a revert):
  not captured (what the reverted messages said did happen);
- a session older than the event log (no events, or a log whose event 0 is not ``session.created.1``): its
  ``message`` and ``part`` rows, read once as the events that would have written them;
- any other type, part type, table or column (a newer opencode): skipped and counted.

Tool calls take Claude Code's names (``bash`` is ``Bash``, ``read`` ``Read`` with ``filePath`` as
``file_path``…); Engram's own MCP tools, ``engram_memory_recall`` to opencode's model, are
``mcp__engram__memory_recall``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from pathlib import Path

import apsw

from processor.capture import signals
from processor.capture.captured import (
    Skipped,
    ToolCall,
    ToolFailure,
    ToolResult,
    claude_tool,
    failed_quietly,
    failure_text,
    redact_repeated,
    strip_injected_spans,
    tool_target,
)
from processor.capture.formats import (
    OPENCODE,
    DatabaseProblem,
    LineOutcome,
    LineReader,
    SessionDatabase,
    SessionInfo,
    SessionReader,
    StoredRows,
    TurnEnd,
    loads_line,
    skip_unknown,
    tool_note,
)
from processor.capture.lines import Line
from processor.config import Settings
from processor.redaction import redact
from processor.store.opencode import OpencodeDatabase

log = logging.getLogger(__name__)

_DB_NAME = re.compile(r"^opencode(?:-[A-Za-z0-9._]+)?\.db$")
_ROLE = re.compile(rb'"info":\{"id":"([^"\\]+)","sessionID":"[^"\\]*","role":"(user|assistant)"')
_STEP_START = b'"type":"step-start"'
_UNFINISHED = (b'"state":{"status":"pending"', b'"state":{"status":"running"')
# opencode's tools under the names Claude Code gives the same tools, and the input keys those names take.
TOOL_NAMES = {"bash": "Bash", "read": "Read", "write": "Write", "edit": "Edit", "multiedit": "MultiEdit",
              "glob": "Glob", "grep": "Grep", "list": "LS", "webfetch": "WebFetch", "websearch": "WebSearch",
              "todowrite": "TodoWrite", "task": "Task"}
FIRST_EVENT = "session.created.1"  # a session's event 0 when its log goes back to its start
KNOWN_EVENTS = frozenset({"session.created.1", "session.updated.1", "session.deleted.1", "message.updated.1",
                          "message.part.updated.1", "message.removed.1", "message.part.removed.1"})
KNOWN_PARTS = frozenset({"text", "tool", "step-start", "step-finish", "reasoning", "file", "patch", "snapshot",
                         "agent", "subtask", "compaction", "retry"})


class OpencodeFormat(SessionDatabase):
    """opencode's sessions in ``<data dir>/opencode.db``."""

    agent = OPENCODE
    depth = 1  # opencode.db in the data folder itself

    def __init__(self, root: Path, agent_workdir: Path | None = None) -> None:
        super().__init__(root, agent_workdir)
        self._db: OpencodeDatabase | None = None  # open while changes() runs: the readers ask it for roles
        self._counted: set[tuple[str, int]] = set()  # databases whose unknown tables and columns were counted

    @classmethod
    def from_settings(cls, settings: Settings) -> OpencodeFormat | None:
        """The database in the settings' opencode data folder (None: no opencode folder is known)."""
        return None if settings.opencode_dir is None else cls(settings.opencode_dir, settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return False  # nothing below the data folder is a session (its snapshot/ and log/ folders are not)

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        return _DB_NAME.match(parts[-1]) is not None

    def transcript_of(self, path: Path) -> Path | None:
        """The database a changed file belongs to: opencode writes through ``opencode.db-wal``."""
        name = path.name
        for suffix in ("-wal", "-shm", "-journal"):
            if name.endswith(suffix):
                path = path.with_name(name[: -len(suffix)])
                break
        return path if self.accepts(path) else None

    def last_modified(self, path: str, st: os.stat_result) -> float:
        """The database's time, or its write-ahead log's when later (the log holds all writes until a checkpoint,
        leaving the file itself untouched)."""
        try:
            return max(st.st_mtime, os.stat(path + "-wal").st_mtime)
        except OSError:
            return st.st_mtime

    def reader(self, info: SessionInfo) -> LineReader:
        return OpencodeReader(info, self._role_of)

    def _role_of(self, message_id: str) -> str | None:
        try:
            return self._db.role_of(message_id) if self._db is not None else None
        except apsw.Error:
            return None

    def ends(self, path: Path) -> dict[str, int]:
        """Each session's seq past its newest event."""
        with OpencodeDatabase(path) as db:
            return {session_id: last + 1 for session_id, last in db.heads().items()}

    def changes(self, path: Path, cursors: dict[str, int], since_ms: int | None,
                batch_bytes: int) -> Iterator[StoredRows]:
        """Each session with events at or past its cursor (a new one only when it changed since `since_ms`),
        read by seq; a subagent's session and a session of Engram's own work directory are named, never read."""
        try:
            db = OpencodeDatabase(path)
        except apsw.BusyError:
            raise
        except apsw.Error as exc:
            raise DatabaseProblem("cannot_read", f"cannot open opencode's database read-only ({exc})") from None
        self._db = db
        try:
            schema = db.schema()
            if schema.fresh:
                return  # opencode is creating it (its first start): the tables come within seconds
            if schema.missing:
                raise DatabaseProblem("unknown_schema", "this opencode.db has no " + ", ".join(schema.missing)
                                      + ": its schema is newer than this Engram knows, and none of it is read "
                                      "(update Engram)")
            key = (str(path), _inode(path))
            if key not in self._counted:
                self._counted.add(key)
                for thing in schema.unknown:
                    skip_unknown(OPENCODE, thing)
            heads = db.heads()
            wanted = [sid for sid, last in heads.items() if last >= cursors.get(sid, 0)]
            stored = db.sessions(wanted)
            for session in db.unlogged(list(cursors), since_ms):
                # Made before opencode kept its event log: its messages and parts as they are, once.
                info = self._info(session.session_id, session.directory, session.parent_id)
                yield StoredRows(info, [] if info.skip else self._stored(db, session.session_id), 0)
            for session_id in sorted(wanted, key=lambda sid: stored[sid].time_updated or 0 if sid in stored else 0):
                session = stored.get(session_id)
                if session is None:
                    continue  # an aggregate that is no session
                if session_id not in cursors and since_ms is not None and (session.time_updated or 0) < since_ms:
                    continue
                info = self._info(session.session_id, session.directory, session.parent_id)
                if info.skip:
                    yield StoredRows(info, [], 0)
                    continue
                start = cursors.get(session_id, 0)
                if session_id not in cursors and schema.messages and db.first_event(session_id) != FIRST_EVENT:
                    # Its log begins later than the session (an older opencode made it): what it held before.
                    yield StoredRows(info, self._stored(db, session_id), 0)
                while start <= heads[session_id]:
                    events = db.events(session_id, start, batch_bytes)
                    if not events:
                        break
                    lines = [Line(seq, seq + 1, _line(kind, data)) for seq, kind, data in events]
                    start = events[-1][0] + 1
                    yield StoredRows(info, lines, start)
        except apsw.BusyError:
            raise
        except apsw.Error as exc:
            raise DatabaseProblem("cannot_read", f"cannot read opencode's database ({exc})") from None
        finally:
            self._db = None
            db.close()

    @staticmethod
    def _stored(db: OpencodeDatabase, session_id: str) -> list[Line]:
        """A session's messages and parts as they are now, as lines (at cursor 0: before any event)."""
        try:
            return [Line(0, 0, _line(kind, data)) for kind, data in db.stored_rows(session_id)]
        except apsw.SQLError as exc:  # a row whose data is no JSON: the session's events are still read
            log.warning("opencode session %s: its stored messages cannot be read (%s); only its event log is",
                        session_id, exc)
            return []

    def _info(self, session_id: str, directory: str | None, parent_id: str | None) -> SessionInfo:
        if parent_id:
            return SessionInfo(session_id, directory, skip="a subagent's session (its parent session is captured)")
        return self.own_workdir.session(session_id, directory)


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


def _line(kind: str, data: bytes | None) -> bytes:
    """An event as the line its reader reads (``{"type", "data"}``); a type is opencode's dotted name."""
    quoted = _QUOTED.get(kind)
    if quoted is None:
        quoted = json.dumps(kind).encode()
        if len(_QUOTED) < 256:  # a handful of types; a newer opencode's many are quoted each time
            _QUOTED[kind] = quoted
    return b'{"type":' + quoted + (b"}" if data is None else b',"data":' + data + b"}")


_QUOTED: dict[str, bytes] = {}  # event types, as JSON strings


def _iso(ms: int) -> str:
    """Epoch milliseconds as the ISO time other agents' lines carry (time.gmtime: a third of datetime's cost)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class OpencodeReader(SessionReader):
    """One opencode session's events, in order; keeps each message's role (its parts do not say it)."""

    def __init__(self, info: SessionInfo, role_of: Callable[[str], str | None] = lambda _: None) -> None:
        super().__init__(info)
        self._roles: dict[str, str] = {}
        self._role_of = role_of

    def _id(self, raw_id: str) -> str:
        # Ids (prt_…, msg_…, call_…) are opencode's: namespaced by the session, as every agent's are.
        return f"{self.session_id}:{raw_id}"

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        # The event's type, as the format wrote the line: {"type":"<type>","data":…}
        kind = raw[9:raw.find(b'"', 9, 80)] if raw.startswith(b'{"type":"') else b""
        if kind.startswith(b"session."):
            return Skipped("the session's own record")
        if kind == b"message.updated.1":
            found = _ROLE.search(raw, 0, 600)
            if found is not None:
                self._roles[found.group(1).decode()] = found.group(2).decode()
                return Skipped("a message's record (its role kept)")
        elif kind == b"message.part.updated.1":
            # Most of a session's events: a tool part while it runs, a step's start. Known from their first bytes.
            start = raw.find(b'"part":', 0, 400)
            if start >= 0 and (raw.find(_STEP_START, start, start + 200) >= 0
                               or raw.find(_UNFINISHED[0], start, start + 1200) >= 0
                               or raw.find(_UNFINISHED[1], start, start + 1200) >= 0):
                return Skipped("a step's start, or a tool call not finished")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        kind, data = record.get("type"), record.get("data")
        if not isinstance(kind, str):
            return Skipped("an event without a type", problem=True)
        if kind not in KNOWN_EVENTS:
            return skip_unknown(OPENCODE, kind)
        if not isinstance(data, dict):
            return Skipped(f"{kind} without data", problem=True)
        if kind == "message.updated.1":
            info = data.get("info")
            if isinstance(info, dict) and isinstance(info.get("id"), str) and isinstance(info.get("role"), str):
                self._roles[info["id"]] = info["role"]
            return Skipped("a message's record (its role kept)")
        if kind != "message.part.updated.1":
            return Skipped(f"{kind} event (not captured)")
        part = data.get("part")
        if not isinstance(part, dict) or not isinstance(part.get("id"), str) or not part["id"]:
            return Skipped("a part without an id", problem=True)
        at = data.get("time") if isinstance(data.get("time"), int) else None
        return self._part(part, at, awaited)

    def _role(self, message_id: str, part: dict) -> str:
        role = self._roles.get(message_id)
        if role is None:
            role = self._role_of(message_id)
            if role is None:
                # Neither its record nor its row was seen (a database whose message table is gone): an assistant's
                # text part carries its time from its start, the user's has none.
                role = "assistant" if isinstance(part.get("time"), dict) else "user"
            self._roles[message_id] = role
        return role

    def _part(self, part: dict, at: int | None, awaited: Collection[str]) -> LineOutcome:
        kind = part.get("type")
        message_id = part.get("messageID") if isinstance(part.get("messageID"), str) else ""
        if kind == "text":
            return self._text(part, message_id, at)
        if kind == "tool":
            return self._tool(part, message_id, awaited)
        if kind == "step-finish":
            return TurnEnd() if part.get("reason") == "stop" else Skipped("a step's end (more to come)")
        if isinstance(kind, str) and kind in KNOWN_PARTS:
            return Skipped(f"{kind} part")
        return skip_unknown(OPENCODE, f"part/{kind}")

    def _text(self, part: dict, message_id: str, at: int | None) -> LineOutcome:
        if part.get("synthetic") is True or part.get("ignored") is True:
            return Skipped("context a plugin added to the prompt (Engram's own among it)")
        text = part.get("text")
        if not isinstance(text, str):
            return Skipped("a text part without text", problem=True)
        role = self._role(message_id, part)
        times = part.get("time") if isinstance(part.get("time"), dict) else {}
        end = times.get("end") if isinstance(times.get("end"), int) else None
        if role == "assistant" and end is None:
            return Skipped("an answer still being written (its final copy follows)")
        text = strip_injected_spans(text).replace("\x00", "").strip()
        if not text:
            return Skipped("no capturable text")
        ms = end or at
        return self.line(self._id(part["id"]), "user" if role == "user" else "assistant",
                         _iso(ms) if ms else None, redact(text), api_message_id=self._id(message_id) or None,
                         ts_ms=ms)

    def _tool(self, part: dict, message_id: str, awaited: Collection[str]) -> LineOutcome:
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        status = state.get("status")
        if status not in ("completed", "error"):
            return Skipped("a tool call not finished")
        call_id = part.get("callID")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("a tool call without its id", problem=True)
        tool_use_id = self._id(call_id)
        name, tool_input = opencode_tool(part.get("tool"), state.get("input"))
        pending = signals.from_tool_use(name, tool_input)
        uses = ((tool_use_id, replace(pending, text=redact(pending.text))),) if pending is not None else ()
        failed, output = _outcome(name, state, status, pending is not None or tool_use_id in awaited)
        results = (ToolResult(tool_use_id, failed, redact(output)),) if pending is not None or \
            tool_use_id in awaited else ()
        ran_none = not failed and name == "Bash" and failed_quietly(output)  # failed though it exited 0 (as _outcome)
        failures = (ToolFailure(tool_use_id, failure_text(output)),) if failed or ran_none else ()
        times = state.get("time") if isinstance(state.get("time"), dict) else {}
        ms = times.get("end") if isinstance(times.get("end"), int) else None
        return self.line(self._id(part["id"]), "assistant", _iso(ms) if ms else None,
                         redact_repeated(tool_note(name, tool_input)), api_message_id=self._id(message_id),
                         tool_uses=uses, tool_results=results,
                         tool_calls=(ToolCall(tool_use_id, name, tool_target(tool_input)),), failures=failures,
                         ts_ms=ms)


def _outcome(name: str, state: dict, status: str, needed: bool) -> tuple[bool, str]:
    """(whether the call failed, its output: only when `needed` or it failed — outputs can be large). A tool
    that threw says why in ``state.error``; a shell command's own output is ``metadata.output`` (``output`` also
    holds what a plugin appended: Engram's fence)."""
    if status == "error":
        error = state.get("error")
        return True, error.strip() if isinstance(error, str) else ""
    metadata = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
    code = metadata.get("exit")
    failed = name == "Bash" and isinstance(code, int) and not isinstance(code, bool) and code != 0
    output = metadata.get("output") if name == "Bash" and isinstance(metadata.get("output"), str) \
        else state.get("output")
    if not failed and not needed and not (name == "Bash" and isinstance(output, str) and failed_quietly(output)):
        return False, ""
    return failed, strip_injected_spans(output).strip() if isinstance(output, str) else ""


def opencode_tool(name: object, arguments: object) -> tuple[str, dict]:
    """An opencode tool call as Claude Code's tool name and input keys (``captured.claude_tool``)."""
    return claude_tool(name, arguments, TOOL_NAMES, "filePath")
