"""Qwen Code's session files: which files they are, and what each line means.

A session is ``<qwen dir>/projects/<project>/chats/<session uuid>.jsonl``, the project's folder named after its
path with every character that is not a letter or a digit a ``-`` (``/tmp/x/proj`` is ``-tmp-x-proj``). Its
lines are records appended as they happen, each ``{"uuid", "parentUuid", "sessionId", "timestamp", "type",
"provenance", "cwd", "version", …}`` (``docs/agents.md`` has a real one). What is captured:

- ``user`` records of the user's own words (provenance ``real_user``; a message typed during a turn too): the
  prompt's text parts. The first UserPromptSubmit hook's context is a part of its own,
  ``<qwen:user-prompt-submit-context>…``: left out, as every ``<qwen:…>`` part and Engram's fence are. Messages
  Qwen files as a user's for itself (a goal's runtime, a notification, a cron prompt) are not the user's;
- ``assistant`` records: the text parts (not thoughts) and ``functionCall`` parts, under the names Claude Code
  gives the same tools (``run_shell_command`` is ``Bash``, ``read_file`` ``Read``…; an MCP tool reached through
  ``tool_call`` is the tool it calls). A record with no call is the turn's answer: the turn is finished;
- ``tool_result`` records: a call's result, failed when its status is ``error`` (a shell command that exited
  non-zero is one here). A shell result's own output is ``resultDisplay.output``; any other result has the
  PostToolUse/PostToolUseFailure hooks' contexts appended to it, HTML-escaped (``&lt;engram-recollection&gt;``):
  Engram's fence is cut from it, escaped or not;
- a ``system`` record of subtype ``rewind``: the conversation went back to before one of the user's turns.

Every other ``system`` record (UI telemetry, which repeats each call and answer, attribution, titles, slash
commands, compression checkpoints) is skipped from its first bytes, as is every line of a call's result that
succeeded and that no signal awaits. A record type or system subtype this module does not know is skipped and
counted. Subagents write their own files under ``<project>/subagents/``: not captured.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

from processor.capture.captured import (
    Skipped,
    ToolFailure,
    ToolResult,
    failed_quietly,
    failure_text,
    may_have_failed_quietly,
    redact_repeated,
    strip_injected_spans,
)
from processor.capture.formats import (
    QWEN,
    LineOutcome,
    LineReader,
    MessageCalls,
    Rewind,
    SessionInfo,
    SessionReader,
    TranscriptFormat,
    first_record,
    loads_line,
    skip_unknown,
)
from processor.capture.gemini import gemini_tool
from processor.config import Settings
from processor.hook_kit.hook_io import FENCE_CLOSE, FENCE_OPEN
from processor.redaction import redact

_SESSION_FILE = re.compile(r"^[0-9a-fA-F-]{32,36}\.jsonl$")
# The record's type from its first bytes (Qwen writes compact JSON: uuid, parentUuid, sessionId, timestamp, type).
_HEAD = re.compile(rb'^\{"uuid":"[^"\\]*","parentUuid":(?:null|"[^"\\]*"),"sessionId":"[^"\\]*",'
                   rb'"timestamp":"[^"\\]*","type":"([a-z_]+)"')
_SUBTYPE = b'"subtype":"'
# A call's result ends with its ``toolCallResult`` (its outputs, most of a chat's bytes, come before it).
_RESULT = b'"toolCallResult":{"callId":"'
_STATUS = b'","status":"'
_HEAD_BYTES = 1000
TYPES = frozenset({"user", "assistant", "tool_result", "system"})
# The system records of @qwen-code/qwen-code 0.24.4: none is conversation but a rewind.
SYSTEM_SUBTYPES = frozenset({
    "ui_telemetry", "attribution_snapshot", "custom_title", "session_source", "file_history_snapshot",
    "branch_checkpoint", "goal_state", "goal_turn_end", "background_task_completed", "slash_command", "omni_recall",
    "chat_compression", "rewind", "session_model", "parent_session", "at_command", "user_text_elements",
    "turn_result", "session_artifact_event", "session_artifact_snapshot", "session_sources_snapshot"})
# The user's own words: a prompt, or a message typed while a turn ran.
_USER_SUBTYPES = (None, "mid_turn_user_message")
# Engram's fence as Qwen files a hook's context: `<` and `>` HTML-escaped (and as given, in case it stops).
_FENCES = (re.compile(re.escape(FENCE_OPEN.replace("<", "&lt;").replace(">", "&gt;")) + r".*?(?:"
                      + re.escape(FENCE_CLOSE.replace("<", "&lt;").replace(">", "&gt;")) + r"|\Z)", re.DOTALL),)
_QWEN_SPAN = re.compile(r"<(qwen:[a-z-]+)[^>]*>.*?(?:</\1>|\Z)", re.DOTALL)
# Qwen's own tools beyond the Gemini CLI's, under Claude Code's names.
_TOOL_NAMES = {"notebook_edit": "NotebookEdit", "agent": "Agent"}
_MCP_BRIDGE = "tool_call"  # a deferred MCP tool, called through this tool: {name, arguments}


def _value_after(raw: bytes, key: bytes, at: int) -> str | None:
    """The string value of the `key` (``"name":"``) found at `at` in the line (None: not found)."""
    if at < 0:
        return None
    start = at + len(key)
    end = raw.find(b'"', start)
    return raw[start:end].decode("utf-8", "replace") if end > start else None


class QwenFormat(TranscriptFormat):
    """Qwen Code's chats under ``<qwen dir>/projects/<project>/chats``."""

    agent = QWEN
    depth = 3  # <project>/chats/<session uuid>.jsonl

    @classmethod
    def from_settings(cls, settings: Settings) -> QwenFormat | None:
        """The chats under the settings' Qwen folder (None: no Qwen folder is known)."""
        return None if settings.qwen_dir is None else cls(settings.qwen_dir / "projects", settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return not parts[-1].startswith(".") if len(parts) == 1 else parts[-1] == "chats"

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        return _SESSION_FILE.match(parts[-1]) is not None

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """The session id (the file's name, also every record's ``sessionId``) and the directory it ran in (every
        record's ``cwd``); None while the first line is incomplete."""
        record = first_record(f)
        if record is None:
            return None
        cwd = record.get("cwd")
        return self.own_workdir.session(path.stem, cwd if isinstance(cwd, str) and cwd else None)

    def reader(self, info: SessionInfo) -> LineReader:
        return QwenReader(info)


class QwenReader(SessionReader):
    """One chat's records, in order; keeps which record each of the user's turns followed, for a rewind."""

    def __init__(self, info: SessionInfo) -> None:
        super().__init__(info)
        self._turn_after: dict[str | None, str] = {}  # a prompt's parentUuid → the prompt's message uuid

    def _id(self, raw_id: str) -> str:
        return f"{self.session_id}:{raw_id}"

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        head = _HEAD.match(raw)
        kind = head.group(1) if head is not None else None
        if kind == b"system":
            name = _value_after(raw, _SUBTYPE, raw.find(_SUBTYPE, 0, _HEAD_BYTES))
            if name != "rewind":
                if name is None or name in SYSTEM_SUBTYPES:
                    return Skipped("a system record (not conversation)")
                return skip_unknown(QWEN, f"system/{name}")
        elif kind == b"tool_result":
            at = raw.rfind(_RESULT)
            call_id = _value_after(raw, _RESULT, at)
            if call_id is not None and raw.startswith(_STATUS + b'success"', at + len(_RESULT) + len(call_id)) \
                    and self._id(call_id) not in awaited and not may_have_failed_quietly(raw):
                return Skipped("a tool's result (not a failure)")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        kind_name, uuid = record.get("type"), record.get("uuid")
        if not isinstance(kind_name, str) or not isinstance(uuid, str) or not uuid:
            return Skipped("a record without type and uuid", problem=True)
        if kind_name not in TYPES:
            return skip_unknown(QWEN, kind_name)
        cwd = record.get("cwd")
        if isinstance(cwd, str) and cwd and (self.cwd is None or cwd != self.cwd):
            self.cwd = redact(cwd)
        timestamp = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        parts = message.get("parts") if isinstance(message.get("parts"), list) else []
        if kind_name == "system":  # one whose first bytes were not read (another key first)
            subtype = record.get("subtype")
            if subtype == "rewind":
                return self._rewind(record)
            if isinstance(subtype, str) and subtype not in SYSTEM_SUBTYPES:
                return skip_unknown(QWEN, f"system/{subtype}")
            return Skipped("a system record (not conversation)")
        if kind_name == "user":
            return self._prompt(record, uuid, timestamp, parts)
        if kind_name == "assistant":
            return self._answer(uuid, timestamp, parts)
        return self._result(record, uuid, timestamp, parts, awaited)

    def _prompt(self, record: dict, uuid: str, timestamp: str | None, parts: list) -> LineOutcome:
        provenance = record.get("provenance", "real_user")
        if provenance != "real_user" or record.get("subtype") not in _USER_SUBTYPES:
            return Skipped(f"a message Qwen files as the user's ({record.get('subtype') or provenance})")
        text = "\n".join(t for part in parts if (t := _part_text(part)))
        if not text:
            return Skipped("no capturable text (injected context only)")
        message_uuid = self._id(uuid)
        parent = record.get("parentUuid")
        self._turn_after[parent if isinstance(parent, str) else None] = message_uuid
        return self.line(message_uuid, "user", timestamp, redact(text))

    def _answer(self, uuid: str, timestamp: str | None, parts: list) -> LineOutcome:
        texts: list[str] = []
        calls = MessageCalls()
        for part in parts:
            call = part.get("functionCall") if isinstance(part, dict) else None
            if not isinstance(call, dict):
                if text := _part_text(part):
                    texts.append(text)
            elif isinstance(call.get("id"), str) and call["id"]:
                calls.add(self._id(call["id"]), *qwen_tool(call.get("name"), call.get("args")))
        if not texts and not calls.notes:
            return Skipped("no capturable text (thoughts only)")
        # Notes alone (a call without a word) repeat: each is redacted once.
        body = redact("\n".join([*texts, *calls.notes])) if texts else redact_repeated("\n".join(calls.notes))
        # An answer that calls no tool ends the turn (Qwen's Stop hook fires then): its round is complete.
        return self.line(self._id(uuid), "assistant", timestamp, body, tool_uses=tuple(calls.uses),
                         tool_calls=tuple(calls.calls), end_turn=not calls.calls)

    def _result(self, record: dict, uuid: str, timestamp: str | None, parts: list,
                awaited: Collection[str]) -> LineOutcome:
        result = record.get("toolCallResult") if isinstance(record.get("toolCallResult"), dict) else {}
        call_id = result.get("callId")
        if not isinstance(call_id, str) or not call_id:
            response = next((p["functionResponse"] for p in parts
                             if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)), {})
            call_id = response.get("id")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("a tool's result without a call id", problem=True)
        tool_use_id = self._id(call_id)
        text, failed = result_text(result, parts)
        results = (ToolResult(tool_use_id, failed, redact(text)),) if tool_use_id in awaited else ()
        failures = (ToolFailure(tool_use_id, failure_text(text)),) if failed or failed_quietly(text) else ()
        if not results and not failures:
            return Skipped("a tool's result (not a failure)")
        return self.results_only(self._id(uuid), timestamp, results, failures)

    def _rewind(self, record: dict) -> LineOutcome:
        """Qwen rewinds by re-rooting: the rewind record's parent is the record the rewound turn followed, and
        that turn's prompt and everything after it are gone."""
        parent = record.get("parentUuid")
        turn = self._turn_after.get(parent if isinstance(parent, str) else None)
        if turn is None:
            return Skipped("a rewind to a turn this reader has not seen (read before a restart): nothing removed",
                           problem=True)
        return Rewind(turn)


def _part_text(part: object) -> str:
    """A text part's own words: not a thought, not a part Qwen injects (``<qwen:…>``), without Engram's fence."""
    if not isinstance(part, dict) or part.get("thought") or not isinstance(part.get("text"), str):
        return ""
    text = part["text"]
    if text.lstrip().startswith("<qwen:"):
        return ""
    if "<" in text:
        text = strip_injected_spans(_QWEN_SPAN.sub("", text))
    return without_fence(text).replace("\x00", "").strip()


def without_fence(text: str) -> str:
    """The text without Engram's fence, HTML-escaped as Qwen files a hook's context, or not."""
    if "engram-recollection" not in text:
        return text
    for pattern in _FENCES:
        text = pattern.sub("", text)
    return strip_injected_spans(text)


def qwen_tool(name: object, args: object) -> tuple[str, dict]:
    """A Qwen tool call as Claude Code's tool name and input keys: the Gemini CLI's tools as Gemini's are read,
    an MCP tool called through ``tool_call`` as that tool, Qwen's own additions by their Claude Code names."""
    args = args if isinstance(args, dict) else {}
    if name == _MCP_BRIDGE and isinstance(args.get("name"), str) and args["name"]:
        called = args.get("arguments")
        return args["name"], called if isinstance(called, dict) else {}
    if isinstance(name, str) and name in _TOOL_NAMES:
        return _TOOL_NAMES[name], args
    canonical, tool_input = gemini_tool(name, args)
    if canonical in ("Glob", "Grep") and isinstance(args.get("path"), str) and args["path"]:
        tool_input = {**tool_input, "path": args["path"]}
    return canonical, tool_input


def result_text(result: dict, parts: list) -> tuple[str, bool]:
    """A call's result as Engram keeps it, and whether the call failed: a shell command's own output, else the
    response the model got without the hooks' contexts Engram can recognise (its own fence)."""
    failed = result.get("status") == "error"
    display = result.get("resultDisplay")
    if isinstance(display, dict) and display.get("type") == "shell_result" and isinstance(display.get("output"), str):
        exit_code = display.get("exitCode")
        return display["output"].strip(), failed or (isinstance(exit_code, int) and exit_code != 0)
    texts = []
    for part in parts:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            texts += [response[key] for key in ("error", "output") if isinstance(response.get(key), str)]
    if not texts and isinstance(display, str):
        texts.append(display)
    return without_fence("\n".join(texts)).strip(), failed
