"""The Codex CLI's session files ("rollouts"): which files they are, and what each line means.

A rollout is ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session uuid>.jsonl``, one JSON record a line:
``{"timestamp", "ordinal"?, "type", "payload"}`` (``docs/agents.md`` has a real one). What is captured:

- ``response_item`` ``message`` of role ``user``: the user's prompt. Codex also files context it injects as
  user messages — ``<environment_context>``, ``AGENTS.md`` instructions, skills, a shell command's output,
  a turn-aborted note — each a content item marked by its tags (and, in newer rollouts, by a provenance that
  is not the user's): those items are left out, and a message of nothing else is not captured;
- ``message`` of role ``assistant``: its ``output_text``. Role ``developer`` (instructions, permissions, any
  hook's ``additionalContext``, Engram's own included) is never captured;
- the items of one model response (its message, its calls), one a line, are one message, as the parts of
  one API message are in Claude Code's transcripts;
- ``function_call`` / ``custom_tool_call`` / ``local_shell_call``: a tool call, under the name Claude Code
  gives the same tool (``exec_command {cmd}`` and ``shell {command: [...]}`` are ``Bash``; ``apply_patch``
  is ``Edit`` / ``Write`` of each file it names; an MCP tool is ``mcp__<server>__<tool>``), so lessons,
  routines and the lesson index read every agent's calls alike;
- ``function_call_output`` / ``custom_tool_call_output``: a result; it failed when the command exited non-zero
  (``Process exited with code N``, ``Exit code: N``, an older rollout's ``metadata.exit_code``);
- ``event_msg`` ``task_complete``: the turn is finished (``TurnEnd``).

Everything else (``session_meta`` and ``turn_context`` give the session's directory; reasoning, token counts,
world state, the other events) is skipped; a record type this module does not know is skipped and counted.
The line's type is read from its first bytes (Codex writes compact JSON), so most skipped records, the
largest included, are never parsed.
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
    may_have_failed_quietly,
    redact_repeated,
    strip_injected_spans,
    todos_input,
    tool_target,
)
from processor.capture.formats import (
    CODEX,
    LineOutcome,
    LineReader,
    SessionInfo,
    SessionReader,
    TranscriptFormat,
    TurnEnd,
    first_record,
    loads_line,
    skip_unknown,
    tool_note,
)
from processor.config import Settings
from processor.redaction import redact

_UUID_TAIL = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")
# The record's own type, from its first bytes: {"timestamp":"…","ordinal":N,"type":"…","payload":{"type":"…"
_HEAD = re.compile(rb'^\{"timestamp":"[^"]*",(?:"ordinal":\d+,)?"type":"([a-z_]+)"(?:,"payload":\{"type":"([a-z_]+)")?')
KNOWN = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "world_state", "token_usage_record",
                   "compacted"})
# Response items that are never conversation (reasoning is most of a rollout's bytes).
_SKIPPED_ITEMS = frozenset({"reasoning", "web_search_call", "image_generation_call", "tool_search_call",
                            "tool_search_output", "ghost_snapshot", "compaction", "compaction_summary", "other"})
_SKIPPED_RECORDS = frozenset({b"world_state", b"token_usage_record", b"compacted"})
_SKIPPED_ITEM_BYTES = frozenset(item.encode() for item in _SKIPPED_ITEMS)
# Context Codex files as user messages (codex-rs "contextual user fragments"): not the user's words.
_CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>",
                     "<skill>", "<user_shell_command>", "<turn_aborted>", "<subagent_notification>", "<hook_prompt",
                     "<collaboration_mode>", "<realtime_conversation>", "<personality_spec", "<tool_context>",
                     "<reasoning_context>", "<pinned_notes>", "<agent_message_board_notification>")
# A whole item that is one tagged block (`<tag …>…</tag>`) is context a newer Codex added, not a prompt.
_TAGGED_BLOCK = re.compile(r"\A\s*<([a-z][a-z_]*)(?:\s[^>]*)?>.*</\1>\s*\Z", re.DOTALL)
_EXIT = re.compile(r"^(?:Process exited with code|Exit code:)\s*(-?\d+)\s*$", re.MULTILINE)
_CALL_ID = re.compile(rb'"call_id":"([^"\\]+)"')
# An output whose command exited 0 (Codex's header, near the line's start) and whose call no signal awaits: read
# from its bytes alone, never parsed (outputs are most of a rollout's bytes).
# What an output that failed holds somewhere (output_text reads which it is).
_FAILURE_MARKS = (b"exited with code", b"Exit code:", b"exit_code", b'"success":false')
_CLEAN_EXIT = re.compile(rb'"output":"(?:Chunk ID: [^"\\]*\\n)?Wall time: [^"\\]*\\nProcess exited with code 0\\n')
_OUTPUT_MARK = "\nOutput:\n"
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
SHELL_TOOLS = frozenset({"exec_command", "shell", "shell_command", "container.exec", "local_shell"})


class CodexFormat(TranscriptFormat):
    """The Codex CLI's rollouts under ``<codex home>/sessions``."""

    agent = CODEX
    depth = 4  # YYYY/MM/DD/rollout-….jsonl

    @classmethod
    def from_settings(cls, settings: Settings) -> CodexFormat | None:
        """The rollouts under the settings' Codex home (None: no Codex home is known)."""
        return None if settings.codex_dir is None else cls(settings.codex_dir / "sessions", settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return parts[-1].isdigit()

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        name = parts[-1]
        return name.startswith("rollout-") and _UUID_TAIL.search(name) is not None

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """The session id (the file name's uuid, also ``session_meta.id``) and directory (``session_meta.cwd``).

        None while the first line is incomplete. A subagent's rollout and a session run in Engram's own
        work directory are not captured.
        """
        match = _UUID_TAIL.search(path.name)
        session_id = match.group(1) if match else path.stem
        record = first_record(f)
        if record is None:
            return None
        payload = record.get("payload")
        if not isinstance(payload, dict) or record.get("type") != "session_meta":
            return SessionInfo(session_id)
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
        source = payload.get("source")
        if isinstance(source, dict) and "subagent" in source:
            return SessionInfo(session_id, cwd, skip="a subagent's rollout (its parent session is captured)")
        return self.own_workdir.session(session_id, cwd)

    def reader(self, info: SessionInfo) -> LineReader:
        return CodexReader(info)


class CodexReader(SessionReader):
    """One rollout's lines, in order; keeps the session's current directory (``turn_context``)."""

    def __init__(self, info: SessionInfo) -> None:
        super().__init__(info)
        # The model's current response: its message and calls, written one item a line, are one message (as
        # Claude Code's parts of one API message are), until an output or a prompt comes between them.
        self._response: str | None = None

    def _part_of(self, uuid: str) -> str:
        self._response = self._response or uuid
        return self._response

    def _id(self, raw_id: object, raw: bytes) -> str:
        # Ids the model's server chose (msg_…, call_…) are unique only to it: namespaced by the session.
        if isinstance(raw_id, str) and raw_id:
            return f"{self.session_id}:{raw_id}"
        return f"{self.session_id}:{hashlib.sha1(raw).hexdigest()[:24]}"

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        head = _HEAD.match(raw)
        if head is not None:
            kind, item = head.group(1), head.group(2)
            if kind in _SKIPPED_RECORDS:
                return Skipped("not conversation")
            if kind == b"event_msg":
                if item != b"task_complete":
                    return Skipped("event")
            elif item in _SKIPPED_ITEM_BYTES:
                return Skipped("not conversation")
            elif item == b"message" and b'"role":"developer"' in raw[:300]:
                return Skipped("developer message (instructions or injected context)")
            elif item in (b"function_call_output", b"custom_tool_call_output"):
                self._response = None
                # An output that cannot say it failed (no exit code, no `success: false`), or whose command exited
                # 0, and that no signal awaits: read from its bytes alone.
                clean = _CLEAN_EXIT.search(raw, 0, 2000) is not None or not any(
                    mark in raw for mark in _FAILURE_MARKS)
                if clean and not may_have_failed_quietly(raw):  # a call may have failed though it exited 0
                    call = _CALL_ID.search(raw, 0, 2000)
                    if call is not None and f"{self.session_id}:{call.group(1).decode()}" not in awaited:
                        return Skipped("a tool's output (not a failure)")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        kind = record.get("type")
        payload = record.get("payload")
        if not isinstance(kind, str) or not isinstance(payload, dict):
            return Skipped("a record without type and payload", problem=True)
        if kind not in KNOWN:
            return skip_unknown(CODEX, kind)
        if kind in ("session_meta", "turn_context"):
            cwd = payload.get("cwd")
            if isinstance(cwd, str) and cwd and cwd != self.cwd:
                self.cwd = redact(cwd)
            return Skipped(f"{kind} record")
        if kind == "event_msg":
            if payload.get("type") != "task_complete":
                return Skipped("event")
            self._response = None
            return TurnEnd()
        if kind != "response_item":
            return Skipped(f"{kind} record")
        timestamp = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
        item = payload.get("type")
        if item == "message":
            return self._message(payload, raw, timestamp)
        if item in ("function_call", "custom_tool_call", "local_shell_call"):
            return self._call(payload, raw, timestamp)
        if item in ("function_call_output", "custom_tool_call_output"):
            return self._output(payload, raw, timestamp, awaited)
        if isinstance(item, str) and item in _SKIPPED_ITEMS:
            return Skipped(f"{item} item")
        return skip_unknown(CODEX, f"response_item/{item}")

    def _message(self, payload: dict, raw: bytes, timestamp: str | None) -> LineOutcome:
        role = payload.get("role")
        if role not in ("user", "assistant"):
            return Skipped(f"{role} message (instructions or injected context)")
        content = payload.get("content")
        if not isinstance(content, list):
            return Skipped(f"{role} message without content", problem=True)
        provenance = _provenances(payload)
        parts = []
        for index, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("text"), str):
                continue  # images, files
            text = block["text"]
            if role == "user" and (_is_context(text) or provenance.get(index, "user") != "user"):
                continue
            text = strip_injected_spans(text).strip()
            if text:
                parts.append(text)
        text = "\n".join(parts).replace("\x00", "").strip()
        if role == "user":
            self._response = None
        if not text:
            return Skipped("no capturable text (injected context only)")
        uuid = self._id(payload.get("id"), raw)
        return self.line(uuid, role, timestamp, redact(text),
                         api_message_id=self._part_of(uuid) if role == "assistant" else None)

    def _call(self, payload: dict, raw: bytes, timestamp: str | None) -> LineOutcome:
        call_id = payload.get("call_id") or payload.get("id")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("tool call without a call_id", problem=True)
        tool_use_id = f"{self.session_id}:{call_id}"
        calls = codex_tool_calls(payload)
        uses = []
        for name, tool_input in calls:
            pending = signals.from_tool_use(name, tool_input)
            if pending is not None:  # a commit or tracker text: redacted like every captured text
                uses.append((tool_use_id, replace(pending, text=redact(pending.text))))
                break
        tool_calls = tuple(ToolCall(tool_use_id if i == 0 else f"{tool_use_id}#{i + 1}", name, tool_target(tool_input))
                           for i, (name, tool_input) in enumerate(calls))
        notes = "\n".join(tool_note(name, tool_input) for name, tool_input in calls)
        uuid = self._id(payload.get("id") or call_id, raw)
        return self.line(uuid, "assistant", timestamp, redact_repeated(notes), api_message_id=self._part_of(uuid),
                         tool_uses=tuple(uses), tool_calls=tool_calls)

    def _output(self, payload: dict, raw: bytes, timestamp: str | None, awaited: Collection[str]) -> LineOutcome:
        self._response = None
        call_id = payload.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("tool output without a call_id", problem=True)
        tool_use_id = f"{self.session_id}:{call_id}"
        text, failed = output_text(payload.get("output"))
        results = (ToolResult(tool_use_id, failed, redact(text)),) if tool_use_id in awaited else ()
        failures = (ToolFailure(tool_use_id, failure_text(text)),) if failed or failed_quietly(text) else ()
        if not results and not failures:
            return Skipped("a tool's output (not a failure)")
        return self.results_only(self._id(payload.get("id") or f"out:{call_id}", raw), timestamp, results, failures)


def _provenances(payload: dict) -> dict[int, str]:
    """Per content item, who wrote it (newer rollouts: ``user``, ``harness``…); {} when not recorded."""
    meta = payload.get("internal_chat_message_metadata_passthrough")
    items = meta.get("content_item_metadata") if isinstance(meta, dict) else None
    if not isinstance(items, list):
        return {}
    found = {}
    for index, item in enumerate(items):
        provenance = item.get("provenance") if isinstance(item, dict) else None
        if isinstance(provenance, dict) and isinstance(provenance.get("type"), str):
            found[index] = "user" if provenance["type"] == "user" and not provenance.get("hook") else "injected"
    return found


def _is_context(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(_CONTEXT_PREFIXES) or _TAGGED_BLOCK.match(text) is not None


def codex_tool_calls(payload: dict) -> list[tuple[str, dict]]:
    """A Codex tool call as Claude Code's tool names and inputs: [(name, input)], one per file of a patch."""
    name = payload.get("name") if isinstance(payload.get("name"), str) else payload.get("type", "tool")
    namespace = payload.get("namespace")
    if isinstance(namespace, str) and namespace:
        return [(f"{namespace}__{name}", _arguments(payload))]
    if payload.get("type") == "local_shell_call":
        action = payload.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        return _shell(_joined(command))
    if name == "apply_patch":
        patch = payload.get("input") if isinstance(payload.get("input"), str) else _arguments(payload).get("input")
        return _patch_calls(patch if isinstance(patch, str) else "") or [("Edit", {})]
    arguments = _arguments(payload)
    if name in SHELL_TOOLS:
        return _shell(_joined(arguments.get("cmd", arguments.get("command"))))
    if name == "view_image":
        return [("Read", {"file_path": arguments.get("path")})]
    if name == "update_plan":  # the plan, as Claude Code's todo list
        return [(TODO_TOOL, todos_input(arguments.get("plan"), "step"))]
    return [(str(name), arguments)]


def _arguments(payload: dict) -> dict:
    raw = payload.get("arguments")
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _joined(command: object) -> str | None:
    """A command line: as given, or an argv (``["bash", "-lc", "…"]``: the script it runs)."""
    if isinstance(command, str):
        return command
    if isinstance(command, list) and all(isinstance(w, str) for w in command):
        if len(command) >= 3 and command[-2] in ("-lc", "-c") and command[0].rsplit("/", 1)[-1] in (
                "bash", "sh", "zsh"):
            return command[-1]
        return " ".join(command)
    return None


def _shell(command: str | None) -> list[tuple[str, dict]]:
    if command is None:
        return [("Bash", {})]
    stripped = command.lstrip()
    if stripped.startswith("apply_patch") and "*** Begin Patch" in command:
        calls = _patch_calls(command)
        if calls:
            return calls
    return [("Bash", {"command": command})]


def _patch_calls(patch: str) -> list[tuple[str, dict]]:
    """Each file an apply_patch names: a new file is a Write, a changed or deleted one an Edit."""
    return [("Write" if verb == "Add" else "Edit", {"file_path": path.strip()})
            for verb, path in _PATCH_FILE.findall(patch)]


def output_text(output: object) -> tuple[str, bool]:
    """A tool output's text (its command's output, past Codex's header) and whether the call failed."""
    failed = False
    if isinstance(output, dict):  # {"content": …, "success": false}
        failed = output.get("success") is False
        output = output.get("content", output.get("output", ""))
    if isinstance(output, list):
        output = "\n".join(item["text"] for item in output
                           if isinstance(item, dict) and isinstance(item.get("text"), str))
    if not isinstance(output, str):
        return "", failed
    text = output
    if text.startswith("{") and '"metadata"' in text[:4000] or text.startswith('{"output"'):
        try:  # older rollouts: {"output": "...", "metadata": {"exit_code": 1, ...}}
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            meta = value.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            return value["output"], failed or (isinstance(code, int) and code != 0)
    header, mark, body = text.partition(_OUTPUT_MARK)
    exit_code = _EXIT.search(header if mark else text[:400])
    if exit_code is not None and int(exit_code.group(1)) != 0:
        failed = True
    if mark:
        # A patch run through the shell nests a second header: its exit code counts too.
        inner = _EXIT.search(body[:200])
        if inner is not None and body[:200].lstrip().startswith("Exit code:"):
            failed = failed or int(inner.group(1)) != 0
            body = body.partition(_OUTPUT_MARK)[2] or body
        return body, failed
    return text, failed
