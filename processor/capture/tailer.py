"""Tailing one transcript into the store, crash-safely, whichever agent wrote it.

Each batch of complete lines is written in one transaction together with the
new byte offset, so a crash at any moment resumes exactly where the last commit
left off: nothing lost, nothing doubled. A file that shrank, changed inode, or
whose bytes before the saved offset changed, is re-read from the start; the
message uuids (UNIQUE) keep that from duplicating anything.

The file's agent (``processor/capture/agents.py``) names its session and reads its lines; what the lines
say is applied here in file order, in the batch's transaction: new messages, a message written again under
its id (its text replaced), a rewind (the rewound messages removed), a turn marked finished.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import apsw

from processor.capture import signals
from processor.capture.agents import layout_format
from processor.capture.captured import CapturedLine, Skipped, ToolCall, ToolFailure, ToolResult, ToolResultsOnly
from processor.capture.formats import (
    DatabaseProblem,
    LineReader,
    Queued,
    Rewind,
    SessionDatabase,
    SessionInfo,
    TranscriptFormat,
    TurnEnd,
)
from processor.capture.lines import Line, read_complete_lines
from processor.capture.optout import RECORD, marker_level, stronger
from processor.capture.problems import (
    CANNOT_OPEN,
    CANNOT_READ,
    LONG_LINE,
    CaptureProblems,
    not_regular,
    stat_problem,
)
from processor.capture.project import ProjectResolver
from processor.capture.queued import UserQueue
from processor.clock import now_ms as clock_now_ms
from processor.config import Settings
from processor.redaction import redact
from processor.store import queued as queued_sql
from processor.store import sessions as session_sql
from processor.store import signals as signal_sql
from processor.store import tool_calls as tool_call_sql
from processor.store import write_transaction

log = logging.getLogger(__name__)

# Bytes before the saved offset whose hash tells whether the file was rewritten.
_CHECK_WINDOW = 4096
# Problems that a successful open shows are over.
_OPEN_KINDS = (CANNOT_OPEN, "not_regular", "dangling_link", "symlink_loop", "cannot_stat")


@dataclass
class TailResult:
    session_id: str
    agent: str
    lines: int = 0
    captured: list[CapturedLine] = field(default_factory=list)  # new message rows and merged parts
    problems: int = 0
    restarted: bool = False
    opt_out: str | None = None  # the session's opt-out after this tail ('memory', 'record' or None)
    opted_out_now: bool = False  # it was set or raised by what this tail read
    dropped_episodes: list[str] = field(default_factory=list)  # episodes erased by going off the record
    # The turn was finished after the last conversation line read here: the agent marked it (Codex's
    # task_complete) or the line says so (Claude Code's end_turn, a Gemini answer that asked for no tool call).
    turn_ended: bool = False
    # Seconds the turn's end must stand with no newer line before it counts (the format's turn_end_settle).
    turn_end_settle: float = 0.0
    conversed: bool = False  # a conversation line was read (new or written again): the session went on
    rewound: int = 0  # messages removed because the agent rewound its conversation
    skipped: str | None = None  # why the whole file is not captured (a subagent's, Engram's own session)


# Called with (session id, new message rows and merged parts, finished=whether the turn ended after them,
# settle=seconds the end must stand with no newer line before it counts).
CapturedListener = Callable[..., None]
OptOutListener = Callable[["TailResult"], None]
# The opt-out a session asked for outside its transcript (ENGRAM_OFF=record, left by the SessionStart hook).
OptOutRequest = Callable[[str], "str | None"]


class NotATranscript(ValueError):
    """A path that is no agent's session file: under no captured agent's root, and of no agent's layout."""

    def __init__(self, path: Path, formats: list[TranscriptFormat]) -> None:
        roots = ", ".join(str(fmt.root) for fmt in formats) or "none"
        super().__init__(f"{path} is no agent's session file: it is under none of the captured transcript roots "
                         f"({roots}) and its name and folders fit no agent's layout; give the Tailer the format of "
                         "the agent that wrote it (formats=[…], see processor/capture/agents.py)")


_INFO_CACHE = 4096  # files whose session info is kept (it is read from their first line)


def _window_hash(fd: int, end: int) -> tuple[str, int]:
    # pread, not seek + read: the line reader is suspended mid-file on the same descriptor and
    # counts positions itself, so moving the file position under it would desync every offset.
    size = min(_CHECK_WINDOW, end)
    return hashlib.sha1(os.pread(fd, size, end - size)).hexdigest(), size


@dataclass(frozen=True)
class _Progress:
    """Where a committed batch leaves its session: the file's inode and the offset past the batch (a database of
    sessions: the agent's cursor past its rows), and the hash of the bytes before that offset (files only)."""

    inode: int
    end: int
    digest: str | None = None
    window: int = 0


def _file_progress(f: BinaryIO, st: os.stat_result, end: int) -> _Progress:
    digest, window = _window_hash(f.fileno(), end) if end else (None, 0)
    return _Progress(st.st_ino, end, digest, window)


class Tailer:
    """Consumes the complete lines appended to transcripts since their saved offsets."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        batch_bytes: int = Settings.batch_bytes.default,
        max_line_bytes: int = Settings.max_line_bytes.default,
        listeners: list[CapturedListener] | None = None,
        problems: CaptureProblems | None = None,
        opt_out_listeners: list[OptOutListener] | None = None,
        opt_out_request: OptOutRequest | None = None,
        formats: list[TranscriptFormat] | None = None,
        recent_days: float | None = None,
        lessons_dir: Path | None = None,
    ) -> None:
        self.conn = conn
        # A database of sessions (opencode's) is one file: only its sessions changed within this many days are
        # read the first time (None: every session), as `engram run` tails only recent files.
        self.recent_days = recent_days
        # Each line's folder named as a project, and remembered with it (processor/capture/project.py); a clone's
        # root gets an alias to its project's lesson index in `lessons_dir`.
        self.projects = ProjectResolver(conn, lessons_dir)
        self.formats = formats if formats is not None else []
        self._infos: dict[tuple[str, int], SessionInfo] = {}
        # path → (inode, offset reached by committed batches, the reader that reached it)
        self._readers: dict[str, tuple[int, int, LineReader]] = {}
        self._skipped: set[str] = set()
        # A database of sessions read whole, as it was then: (inode, size, last modified).
        self._databases: dict[str, tuple[int, int, float]] = {}
        self.opt_out_listeners = opt_out_listeners if opt_out_listeners is not None else []
        self.opt_out_request = opt_out_request
        self.batch_bytes = batch_bytes
        self.max_line_bytes = max_line_bytes
        self.listeners = listeners if listeners is not None else []
        self.problems = problems if problems is not None else CaptureProblems()

    def _open(self, path: Path) -> BinaryIO | None:
        """The transcript opened for reading, or None (gone, or a problem that is recorded).

        stat first: a FIFO, socket or device named *.jsonl must never be opened, since opening a
        FIFO blocks until a writer appears and would stall capture and shutdown. O_NONBLOCK is the
        second guard, for a file swapped for a FIFO between the stat and the open.
        """
        try:
            st = os.stat(path)
        except FileNotFoundError as exc:
            if os.path.islink(path):
                self.problems.report(path, *stat_problem(path, exc))
            else:
                log.info("%s: transcript is gone (deleted or moved); its captured messages are kept", path)
            return None
        except OSError as exc:
            self.problems.report(path, *stat_problem(path, exc))
            return None
        if not stat.S_ISREG(st.st_mode):
            self.problems.report(path, *not_regular(path, st.st_mode))
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            log.info("%s: transcript is gone (deleted or moved); its captured messages are kept", path)
            return None
        except OSError as exc:
            self.problems.report(path, CANNOT_OPEN,
                                 f"cannot open transcript ({exc.strerror}); check its permissions")
            return None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            self.problems.report(path, *not_regular(path, mode))
            return None
        self.problems.resolve(path, _OPEN_KINDS)
        return os.fdopen(fd, "rb")

    def format_for(self, path: Path) -> TranscriptFormat:
        """The format of the agent whose session file `path` is: the one whose root holds it, else (a file under no
        captured agent's root: a test's transcript, a benchmark's copy) the one whose layout it has."""
        fmt = next((fmt for fmt in self.formats if fmt.accepts(path)), None) or layout_format(path)
        if fmt is None:
            raise NotATranscript(path, self.formats)
        return fmt

    def _session_info(self, fmt: TranscriptFormat, path: Path, f: BinaryIO, st: os.stat_result) -> SessionInfo | None:
        key = (str(path), st.st_ino)
        info = self._infos.get(key)
        if info is None:
            info = fmt.session_info(path, f)
            if info is not None:
                if len(self._infos) >= _INFO_CACHE:
                    self._infos.clear()
                self._infos[key] = info
        return info

    def tail(self, path: Path) -> TailResult:
        """Capture everything new in `path`; returns what was captured (of every session it holds, for a database
        of sessions)."""
        fmt = self.format_for(path)
        if isinstance(fmt, SessionDatabase):
            return self._tail_database(path, fmt)
        # The file's name stands for the session until the format names it.
        result = TailResult(path.stem, fmt.agent, turn_end_settle=fmt.turn_end_settle)
        f = self._open(path)
        if f is None:
            return result
        with f:
            try:
                st = os.fstat(f.fileno())
                info = self._session_info(fmt, path, f, st)
                if info is None:
                    return result  # its first line (the session's header) is still being written
                result.session_id = info.session_id
                if info.skip:
                    result.skipped = info.skip
                    if str(path) not in self._skipped:
                        self._skipped.add(str(path))
                        log.info("%s: not captured: %s", path, info.skip)
                    return result
                self._tail_open_file(path, f, st, result, fmt, info)
            except OSError as exc:
                self.problems.report(path, CANNOT_READ, f"cannot read transcript ({exc.strerror or exc})")
            else:
                self.problems.resolve(path, (CANNOT_READ,))
        self._notify(path, result)
        return result

    def _notify(self, path: Path, result: TailResult) -> None:
        """Tell the listeners what one session's tail captured (committed already)."""
        session_id = result.session_id
        if result.opted_out_now:
            for opt_listener in self.opt_out_listeners:
                try:
                    opt_listener(result)
                except Exception:
                    log.exception("opt-out listener failed for session %s", session_id)
        if len({c.uuid for c in result.captured}) < len(result.captured):
            # A message written again (its last copy stored) is passed on once, as its last copy.
            last = {c.uuid: c for c in result.captured}
            result.captured[:] = [c for c in result.captured if last[c.uuid] is c]
        if result.captured or result.turn_ended or result.conversed:
            # A line that only went on with the turn (a Gemini message written again with its tool calls) is
            # passed on too: an end waiting to settle is not the end.
            for listener in self.listeners:
                try:
                    listener(session_id, result.captured, finished=result.turn_ended,
                             settle=result.turn_end_settle if result.turn_ended else 0.0)
                except Exception:
                    log.exception("listener failed after capturing %s", path)

    def _tail_database(self, path: Path, fmt: SessionDatabase) -> TailResult:
        """Capture what is new in each session of a database of sessions (opencode's), by the agent's own cursor:
        each session's rows and its cursor past them committed in one transaction, as a file's lines and offset
        are. A database that was replaced (another inode) is read from each session's first row (what is stored
        already is not doubled)."""
        total = TailResult(path.name, fmt.agent)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            log.info("%s: database is gone (deleted or moved); its captured messages are kept", path)
            return total
        except OSError as exc:
            self.problems.report(path, *stat_problem(path, exc))
            return total
        inode = st.st_ino
        # Unchanged since it was last read whole (a rescan, a watch event of a read): nothing to open.
        seen = (inode, st.st_size, fmt.last_modified(str(path), st))
        if self._databases.get(str(path)) == seen:
            return total
        cursors = {session_id: offset for session_id, offset, stored_inode
                   in session_sql.cursors(self.conn, str(path)) if stored_inode == inode}
        since_ms = None if self.recent_days is None else clock_now_ms() - int(self.recent_days * 86_400_000)
        results: dict[str, TailResult] = {}
        try:
            for change in fmt.changes(path, cursors, since_ms, self.batch_bytes):
                info = change.info
                result = results.setdefault(info.session_id, TailResult(info.session_id, fmt.agent,
                                                                        turn_end_settle=fmt.turn_end_settle))
                if info.skip:
                    result.skipped = info.skip
                    key = f"{path}#{info.session_id}"
                    if key not in self._skipped:
                        self._skipped.add(key)
                        log.info("%s: session %s not captured: %s", path, info.session_id, info.skip)
                    continue
                key = f"{path}#{info.session_id}"
                start = change.rows[0].offset if change.rows else change.end
                cached = self._readers.get(key)
                reader = cached[2] if cached is not None and cached[:2] == (inode, start) else fmt.reader(info)
                self._readers.pop(key, None)
                rows = [row if row.data is None or len(row.data) <= self.max_line_bytes
                        else Line(row.offset, row.end, None) for row in change.rows]
                self._commit_batch(path, rows, result, reader, info, _Progress(inode, change.end))
                self._readers[key] = (inode, change.end, reader)
        except DatabaseProblem as exc:
            total.problems += 1
            self.problems.report(path, exc.kind, exc.detail)
        else:
            self.problems.resolve(path, (CANNOT_READ, "cannot_read", "unknown_schema"))
            self._databases[str(path)] = seen
        finally:
            for result in results.values():
                if not result.skipped:
                    self._notify(path, result)
                total.lines += result.lines
                total.captured += result.captured
                total.problems += result.problems
                total.turn_ended = total.turn_ended or result.turn_ended
                total.conversed = total.conversed or result.conversed
        return total

    def _start_offset(self, path: Path, f, st: os.stat_result, state: session_sql.SessionState | None) -> int:
        if state is None:
            return 0
        reason = None
        if state.inode is not None and state.inode != st.st_ino:
            reason = "was replaced (new inode)"
        elif st.st_size < state.byte_offset:
            reason = f"shrank below the captured offset ({st.st_size} < {state.byte_offset})"
        elif state.byte_offset and state.last_line_hash:
            digest, _ = _window_hash(f.fileno(), state.byte_offset)
            if digest != state.last_line_hash:
                reason = "was rewritten before the captured offset"
        if reason:
            log.warning("%s %s; re-reading it from the start (already captured messages are not doubled)",
                        path, reason)
            return 0
        return state.byte_offset

    def _reader(self, path: Path, st: os.stat_result, offset: int, fmt: TranscriptFormat,
                info: SessionInfo) -> LineReader:
        """The file's reader where the last tail left it (a Codex response's message and calls, one a line, may
        straddle two tails), or a fresh one when the file is read from anywhere else."""
        cached = self._readers.get(str(path))
        if cached is not None and cached[0] == st.st_ino and cached[1] == offset:
            return cached[2]
        if len(self._readers) >= _INFO_CACHE:
            self._readers.clear()
        return fmt.reader(info)

    def _tail_open_file(self, path: Path, f, st: os.stat_result, result: TailResult, fmt: TranscriptFormat,
                        info: SessionInfo) -> None:
        state = session_sql.session_state(self.conn, result.session_id)
        offset = self._start_offset(path, f, st, state)
        result.restarted = state is not None and offset == 0 and state.byte_offset > 0
        if offset == st.st_size and not result.restarted:
            return  # nothing new
        reader = self._reader(path, st, offset, fmt, info)
        self._readers.pop(str(path), None)  # kept again only with the offset of a committed batch
        try:
            lines = read_complete_lines(f, offset, chunk_size=min(self.batch_bytes, 1 << 20),
                                        max_line_bytes=self.max_line_bytes)
            batch: list[Line] = []
            batch_size = 0
            for line in lines:
                batch.append(line)
                batch_size += line.end - line.offset
                if batch_size >= self.batch_bytes:
                    self._commit_batch(path, batch, result, reader, info, _file_progress(f, st, batch[-1].end))
                    self._readers[str(path)] = (st.st_ino, batch[-1].end, reader)
                    batch, batch_size = [], 0
            if batch:
                self._commit_batch(path, batch, result, reader, info, _file_progress(f, st, batch[-1].end))
                self._readers[str(path)] = (st.st_ino, batch[-1].end, reader)
            elif result.restarted and result.lines == 0:
                # forget the stale offset and inode
                self._commit_batch(path, [], result, reader, info, _file_progress(f, st, 0))
        except BaseException:
            self._readers.pop(str(path), None)  # it read past what was committed
            raise

    def _pair_tool_events(self, session_id: str,
                          events: list[tuple[str, int | None, tuple, tuple[ToolResult, ...]]]) -> None:
        for uuid, ts_ms, uses, results in events:
            for tool_use_id, pending in uses:
                signal_sql.add_pending(self.conn, tool_use_id, session_id, uuid, ts_ms, signals.pending_json(pending))
            for tool_result in results:
                stored = signal_sql.pending(self.conn, tool_result.tool_use_id)
                if stored is None:
                    continue
                text = signals.outcome(signals.pending_from_json(stored), tool_result.is_error, tool_result.text)
                signal_sql.resolve(self.conn, tool_result.tool_use_id, uuid, redact(text) if text else None)

    def _commit_batch(self, path: Path, batch: list[Line], result: TailResult, reader: LineReader, info: SessionInfo,
                      progress: _Progress) -> None:
        parsed: list[tuple[Line, CapturedLine]] = []
        # What to store, in file order: runs of captured lines, and the rewinds between them.
        steps: list[list[tuple[CapturedLine, int]] | Rewind] = [[]]
        # High-signal tool uses and their results, in line order: (uuid, ts_ms, uses, results).
        tool_events: list[tuple[str, int | None, tuple, tuple[ToolResult, ...]]] = []
        awaited = signal_sql.pending_ids(self.conn, result.session_id)
        # Every tool call and failed result, in line order: (uuid, ts_ms, calls, failures).
        worked_on: list[tuple[str, int | None, tuple[ToolCall, ...], tuple[ToolFailure, ...]]] = []
        # Lines a later line of the same batch replaces whole (a Gemini message written again): not read at all.
        superseded = reader.superseded([line.data for line in batch])
        turn_touched = False  # a line of this batch says whether the turn ended (kept with the lines)
        # What the user typed while the agent worked, still waiting (none when the file is read from its start).
        queue = UserQueue(result.session_id, queued_sql.waiting(self.conn, result.session_id)
                          if batch and batch[0].offset > 0 else [])
        queue.changed = bool(batch) and batch[0].offset == 0
        for index, line in enumerate(batch):
            if index in superseded:
                continue
            if line.data is None:
                result.problems += 1
                # Keyed by file, the detail naming the line: the same line read again is not news.
                self.problems.report(path, LONG_LINE,
                                     f"line at byte {line.offset} is {line.end - line.offset} bytes, over "
                                     f"max_line_bytes={self.max_line_bytes}; skipped (raise max_line_bytes "
                                     "in config.toml to capture such lines)")
                continue
            outcome = reader.parse(line.data, awaited)
            if isinstance(outcome, TurnEnd):
                result.turn_ended = turn_touched = True
                continue
            if isinstance(outcome, Rewind):
                steps += [outcome, []]
                continue
            if isinstance(outcome, Queued):
                outcome = queue.apply(outcome)
                if outcome is None:
                    continue  # a message queued, or sent as a prompt of its own: its line follows
            if isinstance(outcome, Skipped):
                if outcome.problem:
                    result.problems += 1
                    log.warning("%s: line at byte %d skipped: %s", path, line.offset, outcome.reason)
                continue
            calls = outcome.tool_calls if isinstance(outcome, CapturedLine) else ()
            if calls or outcome.failures:
                worked_on.append((outcome.uuid, outcome.ts_ms, calls, outcome.failures))
            if outcome.tool_results or (isinstance(outcome, CapturedLine) and outcome.tool_uses):
                uses = outcome.tool_uses if isinstance(outcome, CapturedLine) else ()
                awaited.update(tool_use_id for tool_use_id, _ in uses)
                tool_events.append((outcome.uuid, outcome.ts_ms, uses, outcome.tool_results))
            if isinstance(outcome, ToolResultsOnly):
                result.turn_ended = False
                result.conversed = turn_touched = True
                continue
            parsed.append((line, outcome))
            steps[-1].append((outcome, line.offset))
            result.turn_ended = outcome.end_turn
            result.conversed = turn_touched = True
        # Every folder the lines ran in (a session may move between worktrees), with the branch each line was on;
        # the session's project is its first folder's (later ones are remembered, the session keeps its project).
        folders = list(dict.fromkeys((c.cwd, c.git_branch) for _, c in parsed if c.cwd))
        if not folders and info.cwd:
            folders = [(info.cwd, None)]
        now_ms = clock_now_ms()
        asked = None
        for _, captured in parsed:
            if captured.role == "user":
                asked = stronger(asked, marker_level(captured.text))
        if self.opt_out_request is not None:
            asked = stronger(asked, self.opt_out_request(result.session_id))
        with write_transaction(self.conn):
            places = [self.projects.resolve(cwd, branch) for cwd, branch in folders]
            session_sql.upsert_session(
                self.conn,
                session_id=result.session_id,
                transcript_path=str(path),
                project=places[0].project if places else None,
                checkout=(places[0].checkout or places[0].project) if places else None,
                inode=progress.inode,
                byte_offset=progress.end,
                last_line_hash=progress.digest,
                last_line_len=progress.window,
                last_activity=max((c.ts_ms or now_ms for _, c in parsed), default=None),
                now_ms=now_ms,
                agent=result.agent,
            )
            recorded = session_sql.session_opt_out(self.conn, result.session_id)
            level = stronger(recorded, asked)
            if level != recorded:
                session_sql.set_opt_out(self.conn, result.session_id, level)
                result.opted_out_now = True
                if level == RECORD:
                    result.dropped_episodes += session_sql.drop_session_content(
                        self.conn, result.session_id, now_ms)
                    log.info("session %s went off the record: its messages and episodes are dropped",
                             result.session_id)
            result.opt_out = level
            # Off the record: the offset moves on, nothing of the session is stored, now or after a restart.
            for step in steps if level != RECORD else []:
                if isinstance(step, Rewind):
                    self._rewind(path, result, step)
                    continue
                new = session_sql.store_lines(self.conn, result.session_id, step)
                result.captured.extend(captured for (captured, _), is_new in zip(step, new, strict=True) if is_new)
            # In the transaction that advances the offset: a crash between a tool_use and its
            # result re-reads neither line, and loses neither.
            self._pair_tool_events(result.session_id, tool_events)
            if level != RECORD:
                self._record_tool_calls(result.session_id, worked_on)
            if level == RECORD:
                queued_sql.forget(self.conn, result.session_id)
            elif queue.changed:
                queued_sql.replace(self.conn, result.session_id, queue.waiting)
            if turn_touched:
                session_sql.set_turn_ended(self.conn, result.session_id, result.turn_ended)
        result.lines += len(batch)

    def _rewind(self, path: Path, result: TailResult, rewind: Rewind) -> None:
        """Remove the rewound messages (in the batch's transaction); a rewind to a message never captured
        removes nothing and says so once."""
        removed = session_sql.rewind(self.conn, result.session_id, rewind.uuid)
        if removed is None:
            result.problems += 1
            log.warning("%s: the session rewinds to message %s, which was never captured (its line is missing or "
                        "was not conversation); nothing is removed", path, rewind.uuid.rpartition(":")[2])
            return
        result.rewound += removed
        gone = {c.uuid for c in result.captured} - set(session_sql.stored_uuids(
            self.conn, [c.uuid for c in result.captured]))
        result.captured[:] = [c for c in result.captured if c.uuid not in gone]
        log.info("session %s rewound: %d message(s) removed", result.session_id, removed)

    def _record_tool_calls(self, session_id: str, worked_on: list[tuple[str, int | None, tuple[ToolCall, ...],
                                                                       tuple[ToolFailure, ...]]]) -> None:
        tool_call_sql.add_lines(self.conn, session_id, [
            (uuid, ts_ms, [(c.tool_use_id, c.name, c.target) for c in calls],
             [(f.tool_use_id, f.text) for f in failures]) for uuid, ts_ms, calls, failures in worked_on])
