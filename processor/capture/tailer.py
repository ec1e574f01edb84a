"""Tailing one transcript into the store, crash-safely.

Each batch of complete lines is written in one transaction together with the
new byte offset, so a crash at any moment resumes exactly where the last commit
left off: nothing lost, nothing doubled. A file that shrank, changed inode, or
whose bytes before the saved offset changed, is re-read from the start; the
message uuids (UNIQUE) keep that from duplicating anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from processor.capture import signals
from processor.capture.lines import Line, read_complete_lines
from processor.capture.parse import CapturedLine, Skipped, ToolResult, ToolResultsOnly, parse_line
from processor.capture.project import project_root
from processor.capture.redact import redact
from processor.clock import now_ms as clock_now_ms
from processor.config import Settings
from processor.store import sessions as session_sql
from processor.store import signals as signal_sql
from processor.store import write_transaction

log = logging.getLogger(__name__)

# Bytes before the saved offset whose hash tells whether the file was rewritten.
_CHECK_WINDOW = 4096


@dataclass
class TailResult:
    session_id: str
    lines: int = 0
    captured: list[CapturedLine] = field(default_factory=list)  # new message rows and merged parts
    problems: int = 0
    restarted: bool = False


CapturedListener = Callable[[str, list[CapturedLine]], None]


def session_id_for(path: Path) -> str:
    """Claude Code names each transcript after its session id."""
    return path.stem


def _window_hash(f, end: int) -> tuple[str, int]:
    size = min(_CHECK_WINDOW, end)
    f.seek(end - size)
    return hashlib.sha1(f.read(size)).hexdigest(), size


class Tailer:
    """Consumes the complete lines appended to transcripts since their saved offsets."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        batch_bytes: int = Settings.batch_bytes.default,
        max_line_bytes: int = Settings.max_line_bytes.default,
        listeners: list[CapturedListener] | None = None,
    ) -> None:
        self.conn = conn
        self.batch_bytes = batch_bytes
        self.max_line_bytes = max_line_bytes
        self.listeners = listeners if listeners is not None else []
        self._reported: set[tuple[str, str]] = set()

    def _warn_once(self, path: Path, problem: str) -> None:
        # A file that stays unreadable is retried on every event; say so once, not every time.
        key = (str(path), problem)
        if key not in self._reported:
            self._reported.add(key)
            log.warning("%s: %s", path, problem)

    def tail(self, path: Path) -> TailResult:
        """Capture everything new in `path`; returns what was captured."""
        session_id = session_id_for(path)
        result = TailResult(session_id)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below, after fstat
        except FileNotFoundError:
            log.info("%s: transcript is gone (deleted or moved); its captured messages are kept", path)
            return result
        except OSError as exc:
            self._warn_once(path, f"cannot open transcript ({exc.strerror}); check its permissions")
            return result
        with f:
            try:
                st = os.fstat(f.fileno())
                self._tail_open_file(path, f, st, result)
            except OSError as exc:
                self._warn_once(path, f"cannot read transcript ({exc.strerror or exc})")
        if result.captured:
            for listener in self.listeners:
                try:
                    listener(session_id, result.captured)
                except Exception:
                    log.exception("listener failed after capturing %s", path)
        return result

    def _start_offset(self, path: Path, f, st: os.stat_result, state: session_sql.SessionState | None) -> int:
        if state is None:
            return 0
        reason = None
        if state.inode is not None and state.inode != st.st_ino:
            reason = "was replaced (new inode)"
        elif st.st_size < state.byte_offset:
            reason = f"shrank below the captured offset ({st.st_size} < {state.byte_offset})"
        elif state.byte_offset and state.last_line_hash:
            digest, _ = _window_hash(f, state.byte_offset)
            if digest != state.last_line_hash:
                reason = "was rewritten before the captured offset"
        if reason:
            log.warning("%s %s; re-reading it from the start (already captured messages are not doubled)",
                        path, reason)
            return 0
        return state.byte_offset

    def _tail_open_file(self, path: Path, f, st: os.stat_result, result: TailResult) -> None:
        state = session_sql.session_state(self.conn, result.session_id)
        offset = self._start_offset(path, f, st, state)
        result.restarted = state is not None and offset == 0 and state.byte_offset > 0
        if offset == st.st_size and not result.restarted:
            return  # nothing new
        lines = read_complete_lines(f, offset, chunk_size=min(self.batch_bytes, 1 << 20),
                                    max_line_bytes=self.max_line_bytes)
        batch: list[Line] = []
        batch_size = 0
        for line in lines:
            batch.append(line)
            batch_size += line.end - line.offset
            if batch_size >= self.batch_bytes:
                self._commit_batch(path, f, st, batch, batch[-1].end, result)
                batch, batch_size = [], 0
        if batch:
            self._commit_batch(path, f, st, batch, batch[-1].end, result)
        elif result.restarted and result.lines == 0:
            self._commit_batch(path, f, st, [], 0, result)  # forget the stale offset and inode

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

    def _commit_batch(
        self, path: Path, f, st: os.stat_result, batch: list[Line], end: int, result: TailResult
    ) -> None:
        parsed: list[tuple[Line, CapturedLine]] = []
        # High-signal tool uses and their results, in line order: (uuid, ts_ms, uses, results).
        tool_events: list[tuple[str, int | None, tuple, tuple[ToolResult, ...]]] = []
        awaited = signal_sql.pending_ids(self.conn, result.session_id)
        for line in batch:
            if line.data is None:
                result.problems += 1
                log.warning("%s: line at byte %d is %d bytes, over max_line_bytes=%d; skipped "
                            "(raise max_line_bytes in config.toml to capture such lines)",
                            path, line.offset, line.end - line.offset, self.max_line_bytes)
                continue
            outcome = parse_line(line.data, awaited)
            if isinstance(outcome, Skipped):
                if outcome.problem:
                    result.problems += 1
                    log.warning("%s: line at byte %d skipped: %s", path, line.offset, outcome.reason)
                continue
            if outcome.tool_results or (isinstance(outcome, CapturedLine) and outcome.tool_uses):
                uses = outcome.tool_uses if isinstance(outcome, CapturedLine) else ()
                awaited.update(tool_use_id for tool_use_id, _ in uses)
                tool_events.append((outcome.uuid, outcome.ts_ms, uses, outcome.tool_results))
            if isinstance(outcome, ToolResultsOnly):
                continue
            parsed.append((line, outcome))
        digest, window = _window_hash(f, end) if end else (None, 0)
        first_cwd = next((c.cwd for _, c in parsed if c.cwd), None)
        now_ms = clock_now_ms()
        with write_transaction(self.conn):
            session_sql.upsert_session(
                self.conn,
                session_id=result.session_id,
                transcript_path=str(path),
                project_root=project_root(first_cwd) if first_cwd else None,
                inode=st.st_ino,
                byte_offset=end,
                last_line_hash=digest,
                last_line_len=window,
                last_activity=max((c.ts_ms or now_ms for _, c in parsed), default=None),
                now_ms=now_ms,
            )
            for line, captured in parsed:
                if session_sql.store_line(self.conn, result.session_id, captured, line.offset):
                    result.captured.append(captured)
            # In the transaction that advances the offset: a crash between a tool_use and its
            # result re-reads neither line, and loses neither.
            self._pair_tool_events(result.session_id, tool_events)
        result.lines += len(batch)
