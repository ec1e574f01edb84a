"""The Gemini CLI's session files: which files they are, and what each line means.

A session is ``<gemini dir>/tmp/<project slug>/chats/session-<date>T<HH-MM>-<id8>.jsonl`` (the slug's folder
holds ``.project_root``, the project's path; ``<gemini dir>/projects.json`` maps paths to slugs). Its lines:

- the first: the session's header ``{"sessionId", "projectHash", "startTime", "kind"}`` (written again when
  the session is resumed); ``kind: "subagent"`` files, under ``chats/<parent id>/``, are not captured;
- ``{"$set": {...}}``: metadata (``lastUpdated``), or a checkpoint of the model's history (``messages``):
  never new conversation — every message is also written as a line of its own — so it is skipped. The first
  one holds the injected ``<session_context>`` (date, OS, the directory tree);
- a message ``{"id", "timestamp", "type": "user" | "gemini" | "info" | …, "content", "toolCalls"?}``: a
  ``gemini`` message is written again under the same id once its tool calls and their results are known,
  so every copy carries ``replaces`` and the last one wins in the store;
- ``{"$rewindTo": id}``: the conversation went back to just before that message (``Rewind``).

No line marks a turn's end. A ``gemini`` message is written when the model's answer has streamed, and written
again with its ``toolCalls`` once they have run; a turn is over at the model message that asked for no tool
call. So a message with text and no tool calls ends the turn (``end_turn``) once no newer line of the session
followed it for ``turn_end_settle`` seconds (a message whose tool calls still run is written again within them,
and a message that asked only for tool calls has no text of its own): its round is learned seconds after the
answer, not at the idle sweep. A turn whose tool call never came back (the CLI killed mid-call) is over once no
``gemini`` process runs in the session's folder (``process_names``; the memory thread's sweep asks).

Injected context is not the user's words: hooks' ``additionalContext`` reaches the model inside
``<hook_context>`` spans (the SessionStart one prepended to the prompt, BeforeAgent's as a part of its own,
AfterTool's appended to a tool's result), the session context inside ``<session_context>``: all are cut
before the text is redacted and stored, and so is Engram's own fence. Tool calls take Claude Code's names
(``run_shell_command`` is ``Bash``, ``read_file`` ``Read``, ``write_file`` ``Write``, ``replace`` ``Edit``…);
a call failed when its status is ``error`` or its shell command exited non-zero (``Exit Code: N``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from processor.capture import signals
from processor.capture.captured import (
    TODO_TOOL,
    Skipped,
    ToolCall,
    ToolFailure,
    ToolResult,
    failed_quietly,
    failure_text,
    strip_injected_spans,
    todos_input,
    tool_target,
)
from processor.capture.formats import (
    GEMINI,
    LineOutcome,
    LineReader,
    Rewind,
    SessionInfo,
    SessionReader,
    TranscriptFormat,
    first_record,
    loads_line,
    skip_unknown,
    tool_note,
)
from processor.config import Settings
from processor.redaction import redact

_MESSAGE_ID = re.compile(rb'\{"id":"([^"\\]+)","timestamp":"[^"\\]*","type":"(?:gemini|user)"')
_INJECTED = re.compile(r"<(hook_context|session_context)>.*?(?:</\1>|\Z)", re.DOTALL)
_WRAPPER = re.compile(r"</?untrusted_context>")
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)
# Gemini's tools under the names Claude Code gives the same tools, and the input keys those names take.
TOOL_NAMES = {"run_shell_command": "Bash", "read_file": "Read", "read_many_files": "Read", "write_file": "Write",
              "replace": "Edit", "edit": "Edit", "glob": "Glob", "grep_search": "Grep", "search_file_content": "Grep",
              "list_directory": "LS", "web_fetch": "WebFetch", "google_web_search": "WebSearch"}
_PATH_ARGS = ("file_path", "absolute_path", "path")
_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


class GeminiFormat(TranscriptFormat):
    """The Gemini CLI's chats under ``<gemini dir>/tmp/<project>/chats``."""

    agent = GEMINI
    depth = 3  # <project slug>/chats/session-….jsonl
    # A model message with text and no tool calls is written before tool calls it asked for have run (they are
    # added when done): its turn is over once nothing newer followed it for this long.
    turn_end_settle = 2.0
    # A turn whose tool call never came back (the CLI killed mid-call) is over when the CLI is gone.
    process_names = ("gemini",)

    @classmethod
    def from_settings(cls, settings: Settings) -> GeminiFormat | None:
        """The chats under the settings' Gemini folder (None: no Gemini folder is known)."""
        return None if settings.gemini_dir is None else cls(settings.gemini_dir / "tmp", settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return not parts[-1].startswith(".") if len(parts) == 1 else parts[-1] == "chats"

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        return parts[-1].startswith("session-") and parts[-1].endswith(".jsonl")

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """The session id (the header's ``sessionId``: the file name holds only 8 of its characters) and the
        project's directory; None while the header is incomplete."""
        header = first_record(f)
        if header is None:
            return None
        session_id = header.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            # No header to name the session: the file name is the one stable name it has.
            return SessionInfo(f"gemini-{path.stem}")
        cwd = project_dir(path, header.get("projectHash"), self.root.parent)
        if header.get("kind") == "subagent":
            return SessionInfo(session_id, cwd, skip="a subagent's chat (its parent session is captured)")
        return self.own_workdir.session(session_id, cwd)

    def reader(self, info: SessionInfo) -> LineReader:
        return GeminiReader(info)


def project_dir(path: Path, project_hash: object, gemini_dir: Path) -> str | None:
    """The directory a chat's project is: the slug folder's ``.project_root``, else ``projects.json``."""
    slug_dir = path.parent.parent
    try:
        with open(slug_dir / ".project_root", encoding="utf-8") as f:
            text = f.read(4096).strip()
        if text.startswith("/"):
            return text
    except (OSError, UnicodeDecodeError):
        pass
    try:
        with open(gemini_dir / "projects.json", encoding="utf-8") as f:
            projects = json.load(f).get("projects")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(projects, dict):
        return None
    for folder, slug in projects.items():
        if slug == slug_dir.name or (isinstance(project_hash, str)
                                     and hashlib.sha256(folder.encode()).hexdigest() == project_hash):
            return folder
    return None


class GeminiReader(SessionReader):
    """One chat's lines, in order."""

    def _id(self, raw_id: str) -> str:
        return f"{self.session_id}:{raw_id}"

    def superseded(self, raws: list[bytes | None]) -> set[int]:
        """The lines of a batch that a later line of it writes again (the same message id): the last copy holds
        all an earlier one did and more, so only it is read (each line's id from its first bytes)."""
        last: dict[bytes, int] = {}
        earlier: set[int] = set()
        for index, raw in enumerate(raws):
            found = _MESSAGE_ID.match(raw) if raw else None
            if found is not None:
                previous = last.get(found.group(1))
                if previous is not None:
                    earlier.add(previous)
                last[found.group(1)] = index
        return earlier

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        if raw.startswith(b'{"$set":'):
            return Skipped("metadata or history checkpoint ($set)")
        # The user turns that carry tool results back (most of a chat's bytes): no text part, nothing to capture.
        # Gemini writes compact JSON, so `"text":` unescaped is a key, never part of a string.
        if b'"type":"user"' in raw and b'"functionResponse"' in raw and b'"text":' not in raw:
            return Skipped("tool results only (the calling message holds them)")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        if "$rewindTo" in record:
            target = record["$rewindTo"]
            if not isinstance(target, str) or not target:
                return Skipped("$rewindTo without a message id", problem=True)
            return Rewind(self._id(target))
        if "$set" in record:
            return Skipped("metadata or history checkpoint ($set)")
        message_id, kind = record.get("id"), record.get("type")
        if "sessionId" in record and message_id is None:
            return Skipped("session header")
        if not isinstance(message_id, str) or not message_id or not isinstance(kind, str):
            return skip_unknown(GEMINI, "/".join(sorted(k for k in record if isinstance(k, str)))[:60] or "{}")
        if kind not in _MESSAGE_TYPES:
            return skip_unknown(GEMINI, f"message/{kind}")
        if kind not in ("user", "gemini"):
            return Skipped(f"{kind} message (the CLI's own notice)")
        timestamp = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
        text = _text(record.get("content"))
        if kind == "user":
            if not text:
                return Skipped("no capturable text (tool results or injected context only)")
            return self.line(self._id(message_id), "user", timestamp, redact(text), replaces=True)
        return self._gemini(record, message_id, timestamp, text, awaited)

    def _gemini(self, record: dict, message_id: str, timestamp: str | None, text: str,
                awaited: Collection[str]) -> LineOutcome:
        calls = record.get("toolCalls") if isinstance(record.get("toolCalls"), list) else []
        notes: list[str] = []
        tool_calls: list[ToolCall] = []
        uses = []
        results = []
        failures = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
                continue
            tool_use_id = self._id(call["id"])
            name, tool_input = gemini_tool(call.get("name"), call.get("args"))
            notes.append(tool_note(name, tool_input))
            tool_calls.append(ToolCall(tool_use_id, name, tool_target(tool_input)))
            pending = signals.from_tool_use(name, tool_input)
            if pending is not None:
                uses.append((tool_use_id, replace(pending, text=redact(pending.text))))
            output, failed, done = _result(call, pending is not None or tool_use_id in awaited)
            if not done:
                continue
            if pending is not None or tool_use_id in awaited:
                results.append(ToolResult(tool_use_id, failed, redact(output)))
            if failed or (call.get("name") == "run_shell_command" and failed_quietly(output)):
                shell = call.get("name") == "run_shell_command"
                failures.append(ToolFailure(tool_use_id, failure_text(shell_error(output) if shell else output)))
        body = "\n".join(part for part in (text, *notes) if part)
        if not body:
            return Skipped("no capturable text (thoughts only, or tool calls not known yet)")
        return self.line(self._id(message_id), "assistant", timestamp, redact(body), tool_uses=tuple(uses),
                         tool_results=tuple(results), tool_calls=tuple(tool_calls), failures=tuple(failures),
                         replaces=True, end_turn=bool(text) and not calls)


def _text(content: object) -> str:
    """A message's own text: its text parts without injected spans (function calls and responses left out)."""
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
                 and not p.get("thought")]
    elif isinstance(content, dict) and isinstance(content.get("text"), str):
        parts = [content["text"]]
    else:
        return ""
    kept = []
    for part in parts:
        if "<" in part:
            part = strip_injected_spans(_INJECTED.sub("", part))
        part = part.replace("\x00", "").strip()
        if part:
            kept.append(part)
    return "\n".join(kept)


def gemini_tool(name: object, args: object) -> tuple[str, dict]:
    """A Gemini tool call as Claude Code's tool name and input keys (an unknown tool keeps its own)."""
    name = name if isinstance(name, str) and name else "tool"
    args = args if isinstance(args, dict) else {}
    canonical = TOOL_NAMES.get(name, name)
    if name == "write_todos":  # the todo list, as Claude Code's
        return TODO_TOOL, todos_input(args.get("todos"), "description")
    if canonical == "Bash":
        command = args.get("command")
        return canonical, ({"command": command} if isinstance(command, str) else {})
    if canonical in ("Read", "Write", "Edit"):
        path = next((args[k] for k in _PATH_ARGS if isinstance(args.get(k), str) and args[k]), None)
        return canonical, ({"file_path": path} if path else {})
    if canonical in ("Glob", "Grep"):
        found = {"pattern": args.get("pattern")} if isinstance(args.get("pattern"), str) else {}
        if isinstance(args.get("dir_path"), str):
            found["path"] = args["dir_path"]
        return canonical, found
    if canonical == "LS" and isinstance(args.get("dir_path"), str):
        return canonical, {"path": args["dir_path"]}
    return canonical, args


_SHELL_NOTES = ("Process Group PGID: ", "Background PIDs: ")


def shell_error(output: str) -> str:
    """A failed ``run_shell_command``'s result as the command printed it: Gemini labels it ``Output: …`` and adds
    its process ids; the label would be the first word of every error line told, and the ids change each run."""
    text = "\n".join(line for line in output.splitlines() if not line.startswith(_SHELL_NOTES))
    return text[len("Output:"):].lstrip(" ") if text.startswith("Output:") else text


def _result(call: dict, needed: bool) -> tuple[str, bool, bool]:
    """(the result's text — only when `needed` or the call failed —, whether the call failed, whether it has a
    result yet). Outputs can be large: the text is cleaned only when it is kept."""
    status = call.get("status")
    result = call.get("result")
    if status not in ("success", "error", "cancelled") and not result:
        return "", False, False
    texts: list[str] = []
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            for key in ("output", "error", "llmContent"):
                if isinstance(response.get(key), str):
                    texts.append(response[key])
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    failed = status == "error"
    if not failed and call.get("name") == "run_shell_command":
        exit_code = next((m for text in texts if "Exit Code:" in text for m in [_EXIT.search(text)] if m), None)
        failed = exit_code is not None and int(exit_code.group(1)) != 0
    shell_ran_none = not failed and call.get("name") == "run_shell_command" and any(map(failed_quietly, texts))
    if not failed and not needed and not shell_ran_none:
        return "", False, True
    output = "\n".join(texts)
    if "<hook_context>" in output or "<session_context>" in output:
        output = _INJECTED.sub("", output)
    if "untrusted_context>" in output:
        output = _WRAPPER.sub("", output)
    return output.strip(), failed, True
