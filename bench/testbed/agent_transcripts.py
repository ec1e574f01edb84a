"""Builders for the Codex CLI's rollouts and the Gemini CLI's chats, for tests and benchmarks.

Their records copy the shapes the real CLIs wrote (``@openai/codex`` 0.171.0, ``@google/gemini-cli`` 0.61.0,
run against fake model APIs: see docs/agents.md), trimmed of fields Engram never reads.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def _compact(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"  # both CLIs write compact JSON


class Rollout:
    """A Codex CLI session, written as ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`` is."""

    def __init__(self, codex_home: Path, *, cwd: str = "/tmp/project", session_id: str | None = None,
                 start: str = "2026-11-27T05:52:15", source: object = "exec") -> None:
        self.session_id = session_id or str(uuidlib.uuid4())
        self.cwd = cwd
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        self._ordinal = 0
        self._ids = 0
        self.path = (codex_home / "sessions" / self._at.strftime("%Y/%m/%d")
                     / f"rollout-{self._at.strftime('%Y-%m-%dT%H-%M-%S')}-{self.session_id}.jsonl")
        self.lines: list[str] = []
        self.record("session_meta", {"id": self.session_id, "session_id": self.session_id, "cwd": cwd,
                                     "originator": "codex_exec", "cli_version": "0.171.0", "source": source,
                                     "base_instructions": {"text": "You are a coding agent running in the Codex CLI."
                                                           + " Be precise." * 200}})

    def _stamp(self) -> str:
        self._at += timedelta(milliseconds=250)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self._at.microsecond // 1000:03d}Z"

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids}"

    def record(self, kind: str, payload: dict[str, Any]) -> str:
        line = _compact({"timestamp": self._stamp(), "ordinal": self._ordinal, "type": kind, "payload": payload})
        self._ordinal += 1
        self.lines.append(line)
        return line

    def turn(self) -> None:
        self.record("event_msg", {"type": "task_started", "turn_id": "t1", "model_context_window": 258400})
        self.record("turn_context", {"turn_id": "t1", "cwd": self.cwd, "approval_policy": "never",
                                     "model": "gpt-5-fake"})

    def message(self, role: str, *texts: str, provenance: list[str] | None = None) -> str:
        kind = "output_text" if role == "assistant" else "input_text"
        payload: dict[str, Any] = {"type": "message", "id": self._next_id("msg"), "role": role,
                                   "content": [{"type": kind, "text": t} for t in texts]}
        if provenance is not None:
            payload["internal_chat_message_metadata_passthrough"] = {
                "content_item_metadata": [{"provenance": {"type": p, "hook": p == "harness"}} for p in provenance]}
        self.record("response_item", payload)
        return payload["id"]

    def environment(self) -> None:
        """What Codex files before the prompt: instructions, skills, the environment context."""
        self.message("developer", "<permissions instructions>sandbox: danger-full-access</permissions instructions>")
        self.message("developer", "<skills_instructions>\n## Skills\n- imagegen: …</skills_instructions>")
        self.message("user", f"<environment_context>\n  <cwd>{self.cwd}</cwd>\n  <shell>bash</shell>\n"
                             "</environment_context>", provenance=["harness"])

    def hook_context(self, text: str) -> None:
        """A hook's additionalContext, as Codex delivers it: a developer message."""
        self.message("developer", text)

    def prompt(self, text: str) -> str:
        return self.message("user", text, provenance=["user"])

    def exec_command(self, cmd: str, output: str, *, exit_code: int = 0) -> str:
        call_id = self._next_id("call")
        self.record("response_item", {"type": "function_call", "id": self._next_id("fc"), "name": "exec_command",
                                      "arguments": json.dumps({"cmd": cmd}), "call_id": call_id,
                                      "status": "completed"})
        self.record("event_msg", {"type": "item_completed", "item": {
            "type": "CommandExecution", "id": call_id, "command": ["/bin/bash", "-lc", cmd],
            "status": "failed" if exit_code else "completed", "aggregated_output": output, "exit_code": exit_code}})
        self.output(call_id, f"Chunk ID: 88d482\nWall time: 0.0000 seconds\nProcess exited with code {exit_code}\n"
                             f"Original token count: 17\nOutput:\n{output}")
        return call_id

    def output(self, call_id: str, output: object) -> None:
        self.record("response_item", {"type": "function_call_output", "id": self._next_id("fco"),
                                      "call_id": call_id, "output": output})

    def answer(self, text: str) -> str:
        message_id = self.message("assistant", text)
        self.record("token_usage_record", {"session_id": self.session_id, "usage": {"input_tokens": 10}})
        return message_id

    def done(self) -> None:
        self.record("event_msg", {"type": "task_complete", "turn_id": "t1", "last_agent_message": "…"})

    def write(self, upto: int | None = None) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(self.lines[:upto]))
        return self.path


class Chat:
    """A Gemini CLI session, written as ``<gemini dir>/tmp/<slug>/chats/session-<date>T<HH-MM>-<id8>.jsonl`` is."""

    def __init__(self, gemini_dir: Path, *, project: str = "/tmp/project", slug: str = "project",
                 session_id: str | None = None, start: str = "2026-11-27T05:53:15", kind: str = "main") -> None:
        self.session_id = session_id or str(uuidlib.uuid4())
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        folder = gemini_dir / "tmp" / slug
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".project_root").write_text(project)
        self.path = folder / "chats" / f"session-{self._at.strftime('%Y-%m-%dT%H-%M')}-{self.session_id[:8]}.jsonl"
        self.lines: list[str] = []
        self.header(kind)
        self.add({"$set": {"messages": [{"id": uuidlib.uuid4().hex, "timestamp": self._stamp(), "type": "user",
                                         "content": [{"text": "<session_context>\nThis is the Gemini CLI. "
                                                      f"My operating system is: linux\n{project}/\n"
                                                      "</session_context>"}]}],
                          "lastUpdated": self._stamp()}})

    def _stamp(self) -> str:
        self._at += timedelta(milliseconds=250)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self._at.microsecond // 1000:03d}Z"

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        self.lines.append(_compact(record))
        return record

    def header(self, kind: str = "main") -> None:
        self.add({"sessionId": self.session_id, "projectHash": "836ba899b3", "startTime": self._stamp(),
                  "lastUpdated": self._stamp(), "kind": kind})

    def prompt(self, text: str, *, start_context: str | None = None, agent_context: str | None = None) -> str:
        """A prompt, with the SessionStart hook's context prepended and BeforeAgent's as a part of its own."""
        first = f"<hook_context>{start_context}</hook_context>\n\n{text}" if start_context else text
        parts = [{"text": first}] + ([{"text": f"<hook_context>{agent_context}</hook_context>"}]
                                     if agent_context else [])
        message_id = str(uuidlib.uuid4())
        self.add({"id": message_id, "timestamp": self._stamp(), "type": "user", "content": parts,
                  "displayContent": [{"text": first}]})
        self.add({"$set": {"lastUpdated": self._stamp()}})
        return message_id

    def reply(self, text: str, *, message_id: str | None = None, tool_calls: list[dict[str, Any]] | None = None
              ) -> str:
        """A gemini message (call it again with the same id and its tool calls: Gemini's later copy)."""
        message_id = message_id or str(uuidlib.uuid4())
        record: dict[str, Any] = {"id": message_id, "timestamp": self._stamp(), "type": "gemini", "content": text,
                                  "thoughts": [], "tokens": {"input": 10, "output": 5, "total": 15},
                                  "model": "gemini-2.5-flash"}
        if tool_calls is not None:
            record["toolCalls"] = tool_calls
        self.add(record)
        self.add({"$set": {"lastUpdated": self._stamp()}})
        return message_id

    def tool_call(self, name: str, args: dict[str, Any], output: str, *, status: str = "success",
                  after_tool: str | None = None, error: str | None = None) -> dict[str, Any]:
        call_id = f"{name}__{name}_{len(self.lines)}_0"
        response: dict[str, Any] = {"error": error} if error is not None else {
            "output": output + (f"\n\n<hook_context>{after_tool}</hook_context>" if after_tool else "")}
        return {"id": call_id, "name": name, "args": args, "status": status, "timestamp": self._stamp(),
                "result": [{"functionResponse": {"id": call_id, "name": name, "response": response}}]}

    def results(self, calls: list[dict[str, Any]]) -> None:
        """The user turn that carries the tool calls' results back to the model."""
        self.add({"id": str(uuidlib.uuid4()), "timestamp": self._stamp(), "type": "user",
                  "content": [part for call in calls for part in call["result"]]})

    def rewind(self, message_id: str) -> None:
        self.add({"$rewindTo": message_id})

    def write(self, upto: int | None = None) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(self.lines[:upto]))
        return self.path

    def append(self, *lines: str) -> None:
        with open(self.path, "a") as f:
            f.write("".join(lines))


def shell_output(output: str, exit_code: int) -> str:
    """run_shell_command's result text, as Gemini wraps it."""
    return f"<untrusted_context>\nOutput: {output}\nExit Code: {exit_code}\nProcess Group PGID: 15142\n" \
           "</untrusted_context>"
