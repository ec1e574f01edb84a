"""pi's session files: which files they are, and what each line means.

A session is ``<agent dir>/sessions/--<cwd>--/<time>_<session id>.jsonl`` (the agent dir is
``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``; ``<cwd>`` is the directory without its leading ``/``, every ``/``,
``\\`` and ``:`` made ``-``, so the folder cannot be read back into the directory: the header says it). pi writes
nothing until the session's first answer, then appends one compact JSON entry a line (session format 3):

- the first: the header ``{"type": "session", "version", "id", "timestamp", "cwd", "parentSession"?}``;
- ``message`` entries (``id``, ``parentId``: a tree, ``timestamp``) whose ``message`` has a ``role``: ``user``
  (the prompt), ``assistant`` (text, thinking and ``toolCall`` parts; ``stopReason: "stop"`` ends the turn),
  ``toolResult`` (``toolCallId``, ``toolName``, ``content``, ``isError``: a shell command that exited non-zero
  says ``Command exited with code N`` at the end of its text), ``bashExecution`` (a command the user ran with
  ``!``);
- ``custom_message``: context an extension put before the model (Engram's digest and bites among it), never
  captured; ``custom``, ``model_change``, ``thinking_level_change``, ``compaction``, ``branch_summary``,
  ``label``, ``session_info``: not conversation.

What Engram's extension appends to a tool's result (a text part holding its fence) is cut from the failure kept.
Tool calls take Claude Code's names (``bash`` is ``Bash``, ``read`` ``Read`` with ``path`` as ``file_path``…;
Engram's memory tools, ``engram_memory_recall`` to pi's model, are ``mcp__engram__memory_recall``).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

from processor.capture.captured import (
    Skipped,
    ToolFailure,
    ToolResult,
    claude_tool,
    failed_quietly,
    failure_text,
    may_have_failed_quietly,
    strip_injected_spans,
)
from processor.capture.formats import (
    PI,
    LineOutcome,
    LineReader,
    MessageCalls,
    SessionInfo,
    SessionReader,
    TranscriptFormat,
    first_record,
    loads_line,
    skip_unknown,
)
from processor.config import Settings
from processor.redaction import redact

# pi's tools under the names Claude Code gives the same tools (pi's optional grep/find/ls included).
TOOL_NAMES = {"bash": "Bash", "read": "Read", "write": "Write", "edit": "Edit", "grep": "Grep", "find": "Glob",
              "ls": "LS"}
_NOT_CONVERSATION = frozenset({"model_change", "thinking_level_change", "custom", "compaction", "branch_summary",
                               "label", "session_info"})
# The entries that are most of a session's bytes and never captured, recognised from their first bytes.
_CUSTOM_MESSAGE = b'{"type":"custom_message"'
_TOOL_RESULT = b'"role":"toolResult"'
_NOT_FAILED = b'"isError":false'


class PiFormat(TranscriptFormat):
    """pi's sessions under ``<agent dir>/sessions``."""

    agent = PI
    depth = 2  # --<cwd>--/<time>_<id>.jsonl

    @classmethod
    def from_settings(cls, settings: Settings) -> PiFormat | None:
        """The sessions under the settings' pi folder (None: no pi folder is known)."""
        return None if settings.pi_dir is None else cls(settings.pi_dir / "sessions", settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        name = parts[-1]
        return len(name) >= 4 and name.startswith("--") and name.endswith("--")

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        name = parts[-1]
        return name.endswith(".jsonl") and "_" in name and not name.startswith(".")

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """The session id and directory from the header (the file name's id after ``_`` when it has none); None
        while the header is incomplete. A session run in Engram's own work directory is not captured."""
        header = first_record(f)
        if header is None:
            return None
        session_id = header.get("id") if header.get("type") == "session" else None
        if not isinstance(session_id, str) or not session_id:
            return SessionInfo(path.stem.rpartition("_")[2] or path.stem)
        cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
        return self.own_workdir.session(session_id, cwd)

    def reader(self, info: SessionInfo) -> LineReader:
        return PiReader(info)


class PiReader(SessionReader):
    """One pi session's entries, in order."""

    def _id(self, raw_id: str) -> str:
        # An entry's id is 8 hex characters, unique only in its session.
        return f"{self.session_id}:{raw_id}"

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        if raw.startswith(_CUSTOM_MESSAGE):
            return Skipped("context an extension gave the model (Engram's own among it)")
        # A tool's result that did not fail, which no signal awaits: read from its first bytes, never parsed.
        if _TOOL_RESULT in raw[:200] and _NOT_FAILED in raw and not awaited \
                and not may_have_failed_quietly(raw):  # a call may have failed though it exited 0
            return Skipped("a tool's result (not a failure)")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        kind = record.get("type")
        if not isinstance(kind, str):
            return Skipped("an entry without a type", problem=True)
        if kind == "session":
            cwd = record.get("cwd")
            if isinstance(cwd, str) and cwd and cwd != self.cwd:
                self.cwd = redact(cwd)
            return Skipped("session header")
        if kind == "custom_message":
            return Skipped("context an extension gave the model (Engram's own among it)")
        if kind in _NOT_CONVERSATION:
            return Skipped(f"{kind} entry")
        if kind != "message":
            return skip_unknown(PI, kind)
        entry_id, message = record.get("id"), record.get("message")
        if not isinstance(entry_id, str) or not entry_id or not isinstance(message, dict):
            return Skipped("a message entry without id or message", problem=True)
        timestamp = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
        role = message.get("role")
        if role == "user":
            text = _text(message.get("content"))
            if not text:
                return Skipped("no capturable text")
            return self.line(self._id(entry_id), "user", timestamp, redact(text))
        if role == "assistant":
            return self._assistant(entry_id, message, timestamp)
        if role == "toolResult":
            return self._result(entry_id, message, timestamp, awaited)
        if role == "bashExecution":
            return Skipped("a command the user ran (!)")
        return skip_unknown(PI, f"message/{role}")

    def _assistant(self, entry_id: str, message: dict, timestamp: str | None) -> LineOutcome:
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        texts: list[str] = []
        calls = MessageCalls()
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                text = strip_injected_spans(part["text"]).replace("\x00", "").strip()
                if text:
                    texts.append(text)
            elif part.get("type") == "toolCall" and isinstance(part.get("id"), str) and part["id"]:
                calls.add(self._id(part["id"]), *pi_tool(part.get("name"), part.get("arguments")))
        if isinstance(content, str) and content.strip():
            texts.append(strip_injected_spans(content).strip())
        body = "\n".join(part for part in (*texts, *calls.notes) if part)
        finished = message.get("stopReason") == "stop"
        if not body:
            return Skipped("no capturable text (thinking only)")
        return self.line(self._id(entry_id), "assistant", timestamp, redact(body), tool_uses=tuple(calls.uses),
                         tool_calls=tuple(calls.calls), end_turn=finished)

    def _result(self, entry_id: str, message: dict, timestamp: str | None,
                awaited: Collection[str]) -> LineOutcome:
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("a tool result without its call's id", problem=True)
        tool_use_id = self._id(call_id)
        failed = message.get("isError") is True
        output = _text(message.get("content"))
        ran_none = not failed and failed_quietly(output)  # a failure that exited 0
        if not failed and not ran_none and tool_use_id not in awaited:
            return Skipped("a tool's result (not a failure)")
        results = (ToolResult(tool_use_id, failed, redact(output)),) if tool_use_id in awaited else ()
        failures = (ToolFailure(tool_use_id, failure_text(output)),) if failed or ran_none else ()
        return self.results_only(self._id(entry_id), timestamp, results, failures)


def _text(content: object) -> str:
    """A message's own text: its text parts without injected spans (Engram's fenced context among them)."""
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text"
                 and isinstance(p.get("text"), str)]
    else:
        return ""
    kept = [text for part in parts if (text := strip_injected_spans(part).replace("\x00", "").strip())]
    return "\n".join(kept)


def pi_tool(name: object, arguments: object) -> tuple[str, dict]:
    """A pi tool call as Claude Code's tool name and input keys (``captured.claude_tool``)."""
    return claude_tool(name, arguments, TOOL_NAMES, "path")
