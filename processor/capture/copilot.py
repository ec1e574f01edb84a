"""The GitHub Copilot CLI's session files: which files they are, and what each line means.

A session is ``$COPILOT_HOME/session-state/<session uuid>/events.jsonl`` (``~/.copilot`` by default), beside its
``workspace.yaml``: one compact JSON event a line, ``{"type", "data", "id", "timestamp", "parentId"}``, appended
as it happens (``docs/agents.md`` has a real one). What is captured:

- ``user.message``: the prompt as typed (``content``). What the model got (``transformedContent``) adds the date
  and the userPromptSubmitted hooks' contexts inside ``<system_reminder>``: never read. A message a skill or
  another agent sent (``source``), or autopilot's continuation, is not the user's;
- ``assistant.message``: its text and its ``toolRequests``, under the names Claude Code gives the same tools
  (``bash`` is ``Bash``, ``view`` ``Read``, ``create`` ``Write``, ``edit`` ``Edit``; an MCP tool is
  ``mcp__<server>__<tool>``). The messages of one model call (``apiCallId``: a response split at reasoning
  boundaries) are one message; the last of a call that asks for no tool ends the turn (``end_turn``);
- ``tool.execution_complete``: a call's result. It failed when ``success`` is false (``error.message``) or its
  shell command exited non-zero (``shellExecution.exitCode``: Copilot counts that a success). The tool's own
  output is ``detailedContent``; ``content``, what the model got, has the postToolUse hooks' guidance appended;
- ``session.start`` / ``session.resume`` / ``session.context_changed``: the session's directory.

A rewind is never a line of the file (``session.snapshot_rewind`` is an ephemeral event): Copilot takes its
history back in the file itself, so the tailer finds it shorter or rewritten and reads it again from the start,
nothing doubled; the messages taken back stay captured.

A sub-agent's events (``agentId``, ``parentToolCallId``) are not captured, as no agent's subagent transcript is.
Everything else — the hooks' own records (``hook.start``/``hook.end``, which hold the contexts they returned),
the system prompt, usage, reasoning, permissions — is skipped from its first bytes; an event type not in the
schema this module was written against is skipped and counted.
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
    COPILOT,
    LineOutcome,
    LineReader,
    MessageCalls,
    SessionInfo,
    SessionReader,
    TranscriptFormat,
    TurnEnd,
    first_record,
    loads_line,
    skip_unknown,
)
from processor.config import Settings
from processor.hook_kit.hook_io import COPILOT_TOOL_NAMES, copilot_shell_exit
from processor.redaction import redact

EVENTS_FILE = "events.jsonl"
WORKSPACE_FILE = "workspace.yaml"
_SESSION_FOLDER = re.compile(r"^[0-9a-fA-F][0-9a-fA-F-]{7,63}$")
# The event's type, from its first bytes (Copilot writes compact JSON, the type first).
_TYPE = re.compile(rb'^\{"type":"([A-Za-z0-9_.]+)"')
# A call's result whose tool succeeded and whose shell command, if any, exited 0: read from its first bytes (the
# data's keys before ``result`` are short; outputs are most of a session's bytes).
_COMPLETE = re.compile(rb'^\{"type":"tool\.execution_complete","data":\{"toolCallId":"([^"\\]+)"')
_SUCCEEDED = b',"success":true,'
_SHELL_EXIT = re.compile(rb'"shellExecution":\{"exitCode":(-?\d+)')
_HEAD_BYTES = 2000
_WORKSPACE_CWD = re.compile(r"^cwd: *(.+?)\s*$", re.MULTILINE)
# The events the reader acts on.
_READ = frozenset({"user.message", "assistant.message", "tool.execution_complete", "session.start",
                   "session.resume", "session.context_changed"})
# Every event type of the session-events schema that @github/copilot 1.0.102 ships (``schemas/``): the others are
# never conversation (the hooks' records, the system prompt, usage, reasoning, deltas, permissions, MCP, …).
KNOWN = frozenset("""
abort agent.interrupted assistant.fusion_phase_activity assistant.fusion_phase_completed assistant.fusion_phase_failed
assistant.fusion_phase_started assistant.idle assistant.intent assistant.message assistant.message_delta
assistant.message_start assistant.reasoning assistant.reasoning_delta assistant.server_tool_progress
assistant.streaming_delta assistant.tool_call_delta assistant.turn_end assistant.turn_retry assistant.turn_start
assistant.usage auto_mode_switch.completed auto_mode_switch.requested capabilities.changed command.completed
command.execute command.queued commands.changed elicitation.completed elicitation.requested exit_plan_mode.completed
exit_plan_mode.requested external_tool.completed external_tool.requested hook.end hook.progress hook.start
human_response.recorded mcp.headers_refresh_completed mcp.headers_refresh_required mcp.oauth_completed
mcp.oauth_recovery_completed mcp.oauth_required mcp.prompts.list_changed mcp.resources.list_changed
mcp.tools.list_changed mcp_app.tool_call_complete model.call_failure model.call_final_result model.call_finished
model.call_start pending_messages.modified permission.assentDetected permission.carriedForward permission.completed
permission.contextualAuthorization permission.messageAuthorization permission.messageAuthorizationDegraded
permission.messageAuthorizationRead permission.requested prompt_cache_break sampling.completed sampling.requested
sandbox.decision session.auto_mode_resolved session.auto_tier_recommendation session.auto_tier_switch_failed
session.autopilot_objective_changed session.autopilot_stopped session.background_tasks_changed session.binary_asset
session.canvas.closed session.canvas.opened session.canvas.recorded session.canvas.registry_changed
session.canvas.removed session.canvas.unavailable session.compaction_complete session.compaction_start
session.completion_receipt session.context_changed session.context_cleared session.custom_agents_updated
session.custom_notification session.error session.extensions.attachments_pushed session.extensions_loaded
session.fusion_change_checkpoint session.fusion_commit_started session.fusion_completed session.fusion_handoff
session.fusion_resolved session.fusion_route_failed session.fusion_route_started session.handoff session.idle
session.indexed_search session.info session.managed_plugin_progress session.managed_settings_enforced
session.managed_settings_resolved session.mcp_server_needs_reconnect session.mcp_server_removed
session.mcp_server_status_changed session.mcp_server_tools_loaded session.mcp_servers_loaded session.memory_changed
session.mode_changed session.mode_notice_delivered session.model_change session.model_deselected
session.permission_recovery session.permissions_changed session.plan_changed session.quota_observation
session.remote_steerable_changed session.request_body_compression_disabled session.resume session.schedule_cancelled
session.schedule_created session.schedule_rearmed session.session_limits_changed session.shutdown
session.skills_loaded session.snapshot_rewind session.start session.task_complete session.title_changed
session.todos_changed session.tools_updated session.truncation session.usage_checkpoint session.usage_info
session.usage_record session.warning session.workspace_file_changed session_limits_exhausted.completed
session_limits_exhausted.requested skill.context_delivered skill.context_delivered_ref skill.invoked
skill.invoked_ref subagent.completed subagent.configured subagent.deselected subagent.failed subagent.selected
subagent.started system.message system.notification tool.execution_complete tool.execution_partial_result
tool.execution_progress tool.execution_start tool.shell_output tool.user_requested tool_search.activated
ui.ephemeral_query user.message user_input.completed user_input.requested workflow.run_settled workflow.run_started
workflow.run_updated""".split())
_KNOWN_BYTES = frozenset(kind.encode() for kind in KNOWN - _READ)
_READ_BYTES = frozenset(kind.encode() for kind in _READ)


class CopilotFormat(TranscriptFormat):
    """The Copilot CLI's sessions under ``<copilot home>/session-state``."""

    agent = COPILOT
    depth = 2  # <session uuid>/events.jsonl

    @classmethod
    def from_settings(cls, settings: Settings) -> CopilotFormat | None:
        """The sessions under the settings' Copilot folder (None: no Copilot folder is known)."""
        if settings.copilot_dir is None:
            return None
        return cls(settings.copilot_dir / "session-state", settings.agent_workdir)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return _SESSION_FOLDER.match(parts[-1]) is not None  # not .session-operation-locks

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        return parts[-1] == EVENTS_FILE

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo | None:
        """The session id (the folder's name, also ``session.start``'s ``sessionId``) and directory (the start
        event's ``context.cwd``, else ``workspace.yaml``'s ``cwd``); None while the first line is incomplete."""
        record = first_record(f)
        if record is None:
            return None
        session_id = path.parent.name
        data = record.get("data") if record.get("type") == "session.start" else None
        context = data.get("context") if isinstance(data, dict) else None
        cwd = context.get("cwd") if isinstance(context, dict) else None
        if not isinstance(cwd, str) or not cwd:
            cwd = workspace_cwd(path.parent)
        return self.own_workdir.session(session_id, cwd)

    def reader(self, info: SessionInfo) -> LineReader:
        return CopilotReader(info)


def workspace_cwd(folder: Path) -> str | None:
    """The ``cwd`` of a session folder's ``workspace.yaml`` (None: no such file or line)."""
    try:
        with open(folder / WORKSPACE_FILE, encoding="utf-8") as f:
            text = f.read(64 * 1024)
    except (OSError, UnicodeDecodeError):
        return None
    found = _WORKSPACE_CWD.search(text)
    value = found.group(1).strip("'\"") if found else ""
    return value if value.startswith("/") else None


class CopilotReader(SessionReader):
    """One session's events, in order; keeps the session's directory."""

    def _id(self, raw_id: object) -> str:
        return f"{self.session_id}:{raw_id}"

    def parse(self, raw: bytes, awaited: Collection[str]) -> LineOutcome:
        head = _TYPE.match(raw)
        if head is not None:
            kind = head.group(1)
            if kind not in _READ_BYTES:
                return Skipped("not conversation") if kind in _KNOWN_BYTES else skip_unknown(COPILOT, kind.decode())
            if kind == b"tool.execution_complete" and self._clean_result(raw, awaited) \
                    and not may_have_failed_quietly(raw):  # a call may have failed though it exited 0
                return Skipped("a tool's result (not a failure)")
        record = loads_line(raw)
        if isinstance(record, Skipped):
            return record
        kind, data = record.get("type"), record.get("data")
        if not isinstance(kind, str) or not isinstance(data, dict):
            return Skipped("an event without type and data", problem=True)
        event_id = record.get("id") if isinstance(record.get("id"), str) else None
        return self._event(kind, data, record, event_id, awaited)

    def _event(self, kind: str, data: dict, record: dict, event_id: str | None,
               awaited: Collection[str]) -> LineOutcome:
        if kind not in KNOWN:
            return skip_unknown(COPILOT, kind)
        if kind in ("session.start", "session.resume", "session.context_changed"):
            context = data.get("context") if kind != "session.context_changed" else data
            cwd = context.get("cwd") if isinstance(context, dict) else None
            if isinstance(cwd, str) and cwd and (self.cwd is None or cwd != self.cwd):
                self.cwd = redact(cwd)
            return Skipped(f"{kind} event")
        if kind not in _READ:
            return Skipped("not conversation")
        if "agentId" in record or data.get("parentToolCallId"):
            return Skipped("a sub-agent's event (its parent's call is captured)")
        if event_id is None:
            return Skipped(f"{kind} without an id", problem=True)
        timestamp = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
        if kind == "user.message":
            return self._prompt(data, event_id, timestamp)
        if kind == "assistant.message":
            return self._answer(data, event_id, timestamp)
        return self._result(data, event_id, timestamp, awaited)

    def _prompt(self, data: dict, event_id: str, timestamp: str | None) -> LineOutcome:
        source = data.get("source")
        if isinstance(source, str) and source.startswith(("skill-", "agent-")) or data.get("isAutopilotContinuation"):
            return Skipped("a message a skill, another agent or autopilot sent")
        content = data.get("content")
        text = strip_injected_spans(content).replace("\x00", "").strip() if isinstance(content, str) else ""
        if not text:
            return Skipped("no capturable text")
        return self.line(self._id(event_id), "user", timestamp, redact(text))

    def _answer(self, data: dict, event_id: str, timestamp: str | None) -> LineOutcome:
        requests = data.get("toolRequests") if isinstance(data.get("toolRequests"), list) else []
        calls = MessageCalls()
        for request in requests:
            call_id = request.get("toolCallId") if isinstance(request, dict) else None
            if isinstance(call_id, str) and call_id:
                calls.add(self._id(call_id), *copilot_tool(request))
        content = data.get("content")
        text = strip_injected_spans(content).replace("\x00", "").strip() if isinstance(content, str) else ""
        # The last message of a model call that asks for no tool is the turn's answer: the turn is finished.
        chunk, chunks = data.get("chunkIndex"), data.get("chunkCount")
        last_chunk = not isinstance(chunks, int) or not isinstance(chunk, int) or chunk >= chunks - 1
        ended = not requests and last_chunk
        if not text and not calls.notes:
            return TurnEnd() if ended else Skipped("no capturable text (reasoning only)")
        # Notes alone (a call without a word) repeat: each is redacted once.
        body = redact("\n".join([text, *calls.notes])) if text else redact_repeated("\n".join(calls.notes))
        api_call = data.get("apiCallId")
        return self.line(self._id(event_id), "assistant", timestamp, body,
                         api_message_id=self._id(api_call) if isinstance(api_call, str) and api_call else None,
                         tool_uses=tuple(calls.uses), tool_calls=tuple(calls.calls), end_turn=ended)

    def _clean_result(self, raw: bytes, awaited: Collection[str]) -> bool:
        """Whether a call's result, read from its first bytes, succeeded and is awaited by no signal (then it is
        not parsed); False when its first bytes do not say (it is parsed)."""
        head = _COMPLETE.match(raw)
        if head is None or f"{self.session_id}:{head.group(1).decode()}" in awaited:
            return False
        window = raw[:_HEAD_BYTES]
        succeeded = window.find(_SUCCEEDED)
        if succeeded < 0:
            return False
        shell = _SHELL_EXIT.search(window, 0, succeeded)
        return shell is None or int(shell.group(1)) == 0

    def _result(self, data: dict, event_id: str, timestamp: str | None, awaited: Collection[str]) -> LineOutcome:
        call_id = data.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            return Skipped("a tool's result without a toolCallId", problem=True)
        tool_use_id = self._id(call_id)
        text, failed = result_text(data)
        results = (ToolResult(tool_use_id, failed, redact(text)),) if tool_use_id in awaited else ()
        failures = (ToolFailure(tool_use_id, failure_text(text)),) if failed or failed_quietly(text) else ()
        if not results and not failures:
            return Skipped("a tool's result (not a failure)")
        return self.results_only(self._id(event_id), timestamp, results, failures)


def copilot_tool(request: dict) -> tuple[str, dict]:
    """A Copilot tool request as Claude Code's tool name and input keys (an unknown tool keeps its own)."""
    name = request.get("name") if isinstance(request.get("name"), str) and request.get("name") else "tool"
    args = request.get("arguments") if isinstance(request.get("arguments"), dict) else {}
    server, tool = request.get("mcpServerName"), request.get("mcpToolName")
    if isinstance(server, str) and server and isinstance(tool, str) and tool:
        return f"mcp__{server}__{tool}", args
    canonical = COPILOT_TOOL_NAMES.get(name, name)
    if canonical == "Bash":
        command = args.get("command")
        return canonical, ({"command": command} if isinstance(command, str) else {})
    if canonical in ("Read", "Write", "Edit"):
        path = args.get("path")
        return canonical, ({"file_path": path} if isinstance(path, str) and path else {})
    if canonical in ("Grep", "Glob"):
        found = {"pattern": args["pattern"]} if isinstance(args.get("pattern"), str) else {}
        if isinstance(args.get("paths"), str) and args["paths"]:
            found["path"] = args["paths"]
        return canonical, found
    return canonical, args


def result_text(data: dict) -> tuple[str, bool]:
    """A call's result as Engram keeps it (the tool's own output, or its error) and whether the call failed."""
    if data.get("success") is False:
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return (message if isinstance(message, str) else ""), True
    result = data.get("result") if isinstance(data.get("result"), dict) else {}
    text = result.get("detailedContent")
    if not isinstance(text, str):
        text = result.get("content") if isinstance(result.get("content"), str) else ""
    shell = data.get("shellExecution")
    exit_code = shell.get("exitCode") if isinstance(shell, dict) else None
    output, marked = copilot_shell_exit(text)
    code = exit_code if isinstance(exit_code, int) else marked
    return (output.strip(), bool(code)) if shell is not None or marked is not None else (text, False)
