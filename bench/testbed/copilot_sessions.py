"""A builder for the GitHub Copilot CLI's sessions, for tests and benchmarks.

Its events copy the shapes the real CLI wrote (``@github/copilot`` 1.0.102 run against a fake model API: see
docs/agents.md), trimmed of fields Engram never reads but keeping the big records it must skip (the system
prompt, the hooks' records, usage) so that a benchmark reads realistic bytes.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = ("You are the GitHub Copilot CLI, a terminal assistant built by GitHub. You are running in "
                 "non-interactive mode. " + "Follow the user's instructions carefully. " * 400)


def _compact(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"  # Copilot writes compact JSON


class CopilotSession:
    """A Copilot CLI session, written as ``<copilot home>/session-state/<id>/events.jsonl`` is."""

    def __init__(self, copilot_home: Path, *, cwd: str = "/tmp/project", session_id: str | None = None,
                 start: str = "2026-11-28T05:49:58", workspace: bool = True) -> None:
        self.session_id = session_id or str(uuidlib.uuid4())
        self.cwd = cwd
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        self._parent: str | None = None
        self._turn = 0
        self._calls = 0
        self.folder = copilot_home / "session-state" / self.session_id
        self.path = self.folder / "events.jsonl"
        self.lines: list[str] = []
        self.ids: list[str] = []  # each line's event id
        self.workspace = workspace
        self.event("session.start", {"sessionId": self.session_id, "version": 1, "producer": "copilot-agent",
                                     "copilotVersion": "1.0.102", "startTime": self._stamp(),
                                     "selectedModel": "fake-model", "context": {"cwd": cwd}})

    def _stamp(self) -> str:
        self._at += timedelta(milliseconds=50)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self._at.microsecond // 1000:03d}Z"

    def event(self, kind: str, data: dict[str, Any], **extra: Any) -> str:
        """One event line; returns its id."""
        event_id = str(uuidlib.uuid4())
        self.lines.append(_compact({"type": kind, "data": data, "id": event_id, "timestamp": self._stamp(),
                                    "parentId": self._parent, **extra}))
        self.ids.append(event_id)
        self._parent = event_id
        return event_id

    def hook(self, hook_type: str, hook_input: dict[str, Any], context: str | None = None) -> None:
        """A hook's run, as Copilot records it: its input, and the context it returned."""
        invocation = str(uuidlib.uuid4())
        self.event("hook.start", {"hookInvocationId": invocation, "hookType": hook_type,
                                  "input": {"sessionId": self.session_id, "cwd": self.cwd, **hook_input}})
        output = {"output": {"additionalContext": context}} if context else {}
        self.event("hook.end", {"hookInvocationId": invocation, "hookType": hook_type, "success": True, **output})

    def prompt(self, text: str, *, context: str | None = None, **data: Any) -> str:
        """The user's prompt, with the userPromptSubmitted hook's context in what the model got."""
        self.hook("userPromptSubmitted", {"prompt": text}, context)
        transformed = f"<current_datetime>{self._stamp()}</current_datetime>\n\n{text}"
        if context:
            transformed += f"\n\n<system_reminder>\n{context}\n</system_reminder>"
        event_id = self.event("user.message", {"content": text, "transformedContent": transformed,
                                               "messageId": str(uuidlib.uuid4()), "interactionId": "i1",
                                               "turnId": str(self._turn), **data})
        self.event("system.message", {"role": "system", "content": SYSTEM_PROMPT})
        return event_id

    def _turn_start(self) -> None:
        self.event("assistant.turn_start", {"turnId": str(self._turn), "interactionId": "i1"})
        self.event("session.usage_record", {"usage": {"model": "fake-model", "inputTokens": 100, "outputTokens": 10,
                                                      "cost": 0.0, "duration": 22, "isByok": True}})

    def _turn_end(self) -> None:
        self.event("assistant.turn_end", {"turnId": str(self._turn)})
        self._turn += 1

    def answer(self, text: str, *, api_call: str | None = None, agent_id: str | None = None) -> str:
        """A model response without tool requests: the turn's answer."""
        extra = {"agentId": agent_id} if agent_id else {}
        self._turn_start()
        event_id = self.event("assistant.message", {"messageId": str(uuidlib.uuid4()), "model": "fake-model",
                                                    "content": text, "toolRequests": [], "turnId": str(self._turn),
                                                    "apiCallId": api_call or f"chatcmpl_{uuidlib.uuid4().hex[:12]}"},
                              **extra)
        self._turn_end()
        return event_id

    def call(self, name: str, arguments: dict[str, Any], output: str, *, text: str = "", exit_code: int | None = None,
             error: str | None = None, mcp: tuple[str, str] | None = None, guidance: str | None = None,
             failure_context: str | None = None, agent_id: str | None = None) -> str:
        """A model response asking for one tool, and the call's run: its hooks, then its result. A shell call
        (`exit_code` given) ends its output with Copilot's ``<shellId: N completed with exit code K>``; a call
        with an `error` failed outright. `guidance`: a postToolUse hook's context (appended to what the model
        got); `failure_context`: a postToolUseFailure hook's (only in its hook.end); `agent_id`: a sub-agent's."""
        extra = {"agentId": agent_id} if agent_id else {}
        self._turn_start()
        self._calls += 1
        call_id = f"call_{self._calls:012d}"
        request: dict[str, Any] = {"toolCallId": call_id, "name": name, "arguments": arguments, "type": "function"}
        if mcp:
            request.update({"mcpServerName": mcp[0], "mcpToolName": mcp[1]})
        self.event("assistant.message", {"messageId": str(uuidlib.uuid4()), "model": "fake-model", "content": text,
                                         "toolRequests": [request], "turnId": str(self._turn),
                                         "apiCallId": f"chatcmpl_{uuidlib.uuid4().hex[:12]}"}, **extra)
        self.event("tool.execution_start", {"toolCallId": call_id, "toolName": name, "arguments": arguments},
                   **extra)
        self.hook("preToolUse", {"toolCalls": [{"id": call_id, "name": name, "args": arguments}]})
        data: dict[str, Any] = {"toolCallId": call_id, "model": "fake-model", "interactionId": "i1",
                                "turnId": str(self._turn)}
        if error is not None:
            self.hook("postToolUseFailure", {"toolName": name, "toolArgs": arguments, "error": error},
                      failure_context)
            data.update({"success": False, "error": {"message": error, "code": "failure"}})
        else:
            detailed = output
            if exit_code is not None:
                detailed = f"{output}\n<shellId: {self._calls} completed with exit code {exit_code}>"
                data["shellExecution"] = {"exitCode": exit_code}
            self.hook("postToolUse", {"toolName": name, "toolArgs": arguments,
                                      "toolResult": {"textResultForLlm": detailed, "resultType": "success"}}, guidance)
            content = detailed + (f'\n\nTool "{name}" succeeded. Additional guidance from postToolUse hooks:\n'
                                  f"{guidance}" if guidance else "")
            data.update({"success": True, "result": {"content": content, "detailedContent": detailed}})
        data["toolTelemetry"] = {"properties": {"command": name}, "metrics": {"resultLength": len(output)}}
        self.event("tool.execution_complete", data, **extra)
        self._turn_end()
        return call_id

    def shutdown(self) -> None:
        self.hook("agentStop", {"transcriptPath": str(self.path), "stopReason": "end_turn"})
        self.event("session.shutdown", {"accountingSnapshot": {"totalPremiumRequestCost": 0.0,
                                                               "totalUserRequests": 1}})

    def write(self, upto: int | None = None) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(self.lines[:upto]))
        if self.workspace:
            (self.folder / "workspace.yaml").write_text(
                f"id: {self.session_id}\ncwd: {self.cwd}\nclient_name: github/cli\nname: a session\n")
        return self.path

    def append(self, *lines: str) -> None:
        with open(self.path, "a") as f:
            f.write("".join(lines))
