"""pi's session files, built line by line as pi 0.73.1 writes them, for tests and benchmarks:
``<agent dir>/sessions/--<cwd>--/<time>_<id>.jsonl``, one compact JSON entry a line (session format 3).

The shapes are those the real CLI wrote against a fake model API (docs/agents.md), trimmed of fields Engram never
reads.
"""

from __future__ import annotations

import itertools
import json
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

_ids = itertools.count(1)


def folder_name(cwd: str) -> str:
    """The session folder pi names after a directory: ``--<cwd without its leading />--``, / \\ : made -."""
    inner = cwd[1:] if cwd[:1] in "/\\" else cwd
    return "--" + inner.replace("/", "-").replace("\\", "-").replace(":", "-") + "--"


class PiSession:
    """One pi session; `write()` puts its lines on disk (all of them, or up to a count)."""

    def __init__(self, agent_dir: Path, *, cwd: str = "/tmp/project", session_id: str | None = None,
                 start: str = "2026-11-28T05:56:53") -> None:
        self.session_id = session_id or str(uuidlib.uuid4())
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        stamp = self._at.strftime("%Y-%m-%dT%H-%M-%S-") + f"{self._at.microsecond // 1000:03d}Z"
        self.path = agent_dir / "sessions" / folder_name(cwd) / f"{stamp}_{self.session_id}.jsonl"
        self.lines: list[str] = []
        self._parent: str | None = None
        self.add({"type": "session", "version": 3, "id": self.session_id, "timestamp": self._stamp(), "cwd": cwd})
        self.entry("model_change", provider="fake", modelId="fake-model")
        self.entry("thinking_level_change", thinkingLevel="off")

    def _stamp(self) -> str:
        self._at += timedelta(milliseconds=20)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self._at.microsecond // 1000:03d}Z"

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        self.lines.append(json.dumps(record, separators=(",", ":")) + "\n")
        return record

    def entry(self, kind: str, **fields: Any) -> str:
        entry_id = f"{next(_ids):08x}"
        self.add({"type": kind, "id": entry_id, "parentId": self._parent, "timestamp": self._stamp(), **fields})
        self._parent = entry_id
        return entry_id

    def _message(self, message: dict[str, Any]) -> str:
        return self.entry("message", message={**message, "timestamp": int(self._at.timestamp() * 1000)})

    def prompt(self, text: str) -> str:
        return self._message({"role": "user", "content": [{"type": "text", "text": text}]})

    def injected(self, text: str, custom_type: str = "engram") -> str:
        """Context an extension gave the model (Engram's digest: a custom_message)."""
        return self.entry("custom_message", customType=custom_type, content=text, display=False)

    def answer(self, text: str = "", *calls: tuple[str, str, dict[str, Any]], stop: bool | None = None) -> str:
        """An assistant message: its text and tool calls ((call id, tool, arguments)); it stops the turn when it
        calls nothing (unless `stop` says otherwise)."""
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [{"type": "toolCall", "id": cid, "name": name, "arguments": args} for cid, name, args in calls]
        stopped = not calls if stop is None else stop
        return self._message({"role": "assistant", "content": content, "api": "openai-completions",
                              "provider": "fake", "model": "fake-model",
                              "usage": {"input": 100, "output": 10, "totalTokens": 110},
                              "stopReason": "stop" if stopped else "toolUse", "responseId": f"chatcmpl_{next(_ids)}"})

    def result(self, call_id: str, tool: str, text: str, *, error: bool = False, told: str | None = None) -> str:
        """A tool's result; `told`: what an extension's tool_result appended (a text part of its own)."""
        content = [{"type": "text", "text": text}] + ([{"type": "text", "text": told}] if told else [])
        return self._message({"role": "toolResult", "toolCallId": call_id, "toolName": tool, "content": content,
                              "details": {}, "isError": error})

    def shell(self, command: str, output: str, exit_code: int = 0, *, text: str = "", told: str | None = None) -> str:
        """A bash call and its result, as pi's bash tool reports a command that exited non-zero."""
        call_id = f"call_{next(_ids)}"
        self.answer(text, (call_id, "bash", {"command": command}))
        shown = output if exit_code == 0 else f"{output}\n\n\nCommand exited with code {exit_code}"
        return self.result(call_id, "bash", shown, error=exit_code != 0, told=told)

    def write(self, upto: int | None = None) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(self.lines[:upto]))
        return self.path
