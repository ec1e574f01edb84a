"""A builder for Qwen Code's chats, for tests and benchmarks.

Its records copy the shapes the real CLI wrote (``@qwen-code/qwen-code`` 0.24.4 run against a fake model API: see
docs/agents.md), trimmed of fields Engram never reads but keeping the records it must skip (UI telemetry, which
repeats each call and answer; attribution snapshots) so that a benchmark reads realistic bytes.
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# What every answer's record holds of the model's usage.
_USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "thoughtsTokenCount": 0, "totalTokenCount": 110,
          "cachedContentTokenCount": 0}


def _compact(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"  # Qwen writes compact JSON


def project_folder(cwd: str) -> str:
    """The folder Qwen keeps a project's chats in: its path with every character not a letter or digit a ``-``."""
    return re.sub(r"[^a-zA-Z0-9]", "-", cwd)


def escaped(text: str) -> str:
    """A hook's context as Qwen files it: ``<`` and ``>`` HTML-escaped."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


class QwenChat:
    """A Qwen Code session, written as ``<qwen dir>/projects/<project>/chats/<id>.jsonl`` is."""

    def __init__(self, qwen_dir: Path, *, cwd: str = "/tmp/project", session_id: str | None = None,
                 start: str = "2026-11-28T05:54:47") -> None:
        self.session_id = session_id or str(uuidlib.uuid4())
        self.cwd = cwd
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        self._parent: str | None = None
        self._calls = 0
        self.path = qwen_dir / "projects" / project_folder(cwd) / "chats" / f"{self.session_id}.jsonl"
        self.lines: list[str] = []
        self.uuids: list[str] = []

    def _stamp(self) -> str:
        self._at += timedelta(milliseconds=50)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self._at.microsecond // 1000:03d}Z"

    def record(self, kind: str, fields: dict[str, Any], *, provenance: str | None = None,
               parent: str | None = None) -> str:
        """One record line, chained to the previous one (or to `parent`); returns its uuid."""
        uuid = str(uuidlib.uuid4())
        head = {"uuid": uuid, "parentUuid": parent if parent is not None else self._parent,
                "sessionId": self.session_id, "timestamp": self._stamp(), "type": kind,
                "provenance": provenance or {"user": "real_user", "assistant": "assistant_output",
                                             "tool_result": "tool_result"}.get(kind, "system"),
                "cwd": self.cwd, "version": "0.24.4", "gitBranch": "main"}
        self.lines.append(_compact({**head, **fields}))
        self.uuids.append(uuid)
        self._parent = uuid
        return uuid

    def system(self, subtype: str, payload: dict[str, Any]) -> str:
        return self.record("system", {"subtype": subtype, "systemPayload": payload})

    def prompt(self, text: str, *, context: str | None = None, **fields: Any) -> str:
        """The user's prompt; the first UserPromptSubmit hook's context is a part of its own."""
        parts = [{"text": text}]
        if context:
            parts.append({"text": f"<qwen:user-prompt-submit-context>\n{escaped(context)}\n"
                                  "</qwen:user-prompt-submit-context>"})
        uuid = self.record("user", {"message": {"role": "user", "parts": parts},
                                    "systemPayload": {"displayText": text}, **fields})
        self.system("attribution_snapshot", {"snapshot": {"type": "attribution-snapshot", "fileStates": {}}})
        return uuid

    def _telemetry(self, event: dict[str, Any]) -> None:
        self.system("ui_telemetry", {"uiEvent": {"event.timestamp": self._stamp(), "model": "fake-model",
                                                 "prompt_id": f"{self.session_id}########0",
                                                 "response_id": f"chatcmpl_{self._calls:016d}", **event}})

    def _api_response(self, text: str) -> None:
        self._telemetry({"event.name": "qwen-code.api_response", "status_code": 200, "duration_ms": 406,
                         "input_token_count": 100, "output_token_count": 10, "cached_content_token_count": 0,
                         "thoughts_token_count": 0, "total_token_count": 110, "response_text": text,
                         "auth_type": "openai", "ttft_ms": 377})

    def answer(self, text: str, *, thought: str | None = None) -> str:
        """A model response that calls no tool: the turn's answer."""
        self._api_response(text)
        parts = ([{"text": thought, "thought": True}] if thought else []) + [{"text": text}]
        return self.record("assistant", {"model": "fake-model", "message": {"role": "model", "parts": parts},
                                         "usageMetadata": _USAGE})

    def call(self, name: str, args: dict[str, Any], output: str, *, text: str = "", exit_code: int | None = None,
             error: str | None = None, context: str | None = None) -> str:
        """A model response calling one tool, and its result. A shell call (`exit_code` given) fails when it
        exited non-zero (its result is Qwen's ``Command: …`` block, its own output in ``resultDisplay``); a call
        with an `error` failed outright. `context`: the PostToolUse/PostToolUseFailure hook's, appended
        (HTML-escaped) to the result."""
        self._calls += 1
        call_id = f"call_{self._calls:012d}"
        self._api_response(text)
        parts: list[dict[str, Any]] = ([{"text": text}] if text else []) + [
            {"functionCall": {"id": call_id, "name": name, "args": args}}]
        self.record("assistant", {"model": "fake-model", "message": {"role": "model", "parts": parts},
                                  "usageMetadata": _USAGE})
        appended = f"\n\n{escaped(context)}" if context else ""
        if exit_code is not None:
            block = (f"Command: {args.get('command')}\nDirectory: (root)\nOutput: {output}\nError: (none)\n"
                     f"Exit Code: {exit_code}\nSignal: (none)\nProcess Group PGID: (none)")
            failed = exit_code != 0
            display: Any = {"type": "shell_result", "version": 1, "directory": self.cwd, "exitCode": exit_code,
                            "signal": None, "pid": None, "outcome": "failed" if failed else "completed",
                            "outputFiles": [], "output": output, "text": block + appended if failed else output,
                            "error": None, "notices": [], "truncated": False}
            response = {"error" if failed else "output": block + appended}
            extra = {"errorType": "shell_execute_error"} if failed else {}
        elif error is not None:
            failed, display, response = True, error + appended, {"error": error + appended}
            extra = {"errorType": "file_not_found"}
        else:
            failed, display, response, extra = False, output, {"output": output + appended}, {}
        self._telemetry({"event.name": "qwen-code.tool_call", "call_id": call_id, "function_name": name,
                         "function_args": args, "duration_ms": 414, "status": "error" if failed else "success",
                         "execution_status": "error" if failed else "success", "success": not failed,
                         "decision": "auto_accept", "tool_type": "native", "content_length": len(output),
                         **({"error": response.get("error")} if failed else {})})
        self.record("tool_result", {
            "message": {"role": "user", "parts": [{"functionResponse": {"id": call_id, "name": name,
                                                                        "response": response}}]},
            "toolCallResult": {"callId": call_id, "status": "error" if failed else "success",
                               "resultDisplay": display, **extra,
                               "executionStatus": "error" if failed else "success"}})
        return call_id

    def rewind(self, to_prompt: str) -> None:
        """The user rewound to before the prompt `to_prompt` (its uuid): Qwen re-roots the chain there."""
        prompt = json.loads(self.lines[self.uuids.index(to_prompt)])
        self._parent = prompt["parentUuid"]
        self.record("system", {"subtype": "rewind", "systemPayload": {"targetTurnIndex": 0}},
                    parent=prompt["parentUuid"])

    def write(self, upto: int | None = None) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(self.lines[:upto]))
        return self.path

    def append(self, *lines: str) -> None:
        with open(self.path, "a") as f:
            f.write("".join(lines))
