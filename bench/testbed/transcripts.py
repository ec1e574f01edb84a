"""Builders for transcript lines in Claude Code's format, for tests and benchmarks."""

from __future__ import annotations

import json
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def user_line(text: Any, *, session_id: str, uid: str | None = None, cwd: str = "/tmp/project",
              parent: str | None = None, timestamp: str = "2026-11-01T10:00:00.000Z", **extra: Any) -> str:
    entry = {
        "parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": cwd,
        "sessionId": session_id, "version": "2.1.114", "gitBranch": "main", "type": "user",
        "message": {"role": "user", "content": text},
        "uuid": uid or str(uuidlib.uuid4()), "timestamp": timestamp, **extra,
    }
    return json.dumps(entry) + "\n"


def assistant_line(blocks: list[dict[str, Any]] | str, *, session_id: str, message_id: str = "msg_1",
                   uid: str | None = None, cwd: str = "/tmp/project",
                   timestamp: str = "2026-11-01T10:00:05.000Z", **extra: Any) -> str:
    content = [{"type": "text", "text": blocks}] if isinstance(blocks, str) else blocks
    entry = {
        "parentUuid": None, "isSidechain": False, "userType": "external", "cwd": cwd,
        "sessionId": session_id, "version": "2.1.114", "gitBranch": "main", "type": "assistant",
        "message": {"id": message_id, "type": "message", "role": "assistant", "model": "claude",
                    "content": content},
        "uuid": uid or str(uuidlib.uuid4()), "timestamp": timestamp, **extra,
    }
    return json.dumps(entry) + "\n"


class Conversation:
    """A session written the way Claude Code writes it: prompts, replies, tool uses and their results, each
    line a few seconds after the one before. ``lines`` is the transcript (JSON lines, newline-ended)."""

    def __init__(self, session_id: str, *, cwd: str = "/tmp/project", start: str = "2026-11-01T10:00:00",
                 step_seconds: int = 5, branch: str = "main") -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.branch = branch  # each line's gitBranch
        self._at = datetime.fromisoformat(start).replace(tzinfo=UTC)
        self._step = step_seconds
        self._messages = 0
        self.lines: list[str] = []
        self.uuids: list[str] = []

    def _stamp(self) -> str:
        self._at += timedelta(seconds=self._step)
        return self._at.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def _add(self, line: str) -> str:
        self.lines.append(line)
        uid = json.loads(line)["uuid"]
        self.uuids.append(uid)
        return uid

    def user(self, text: str) -> str:
        return self._add(user_line(text, session_id=self.session_id, cwd=self.cwd, timestamp=self._stamp(),
                                   gitBranch=self.branch))

    def say(self, text: str, *, end_turn: bool = False) -> str:
        self._messages += 1
        line = assistant_line(text, session_id=self.session_id,
                              message_id=f"msg_{self.session_id[:8]}_{self._messages}", cwd=self.cwd,
                              timestamp=self._stamp(), gitBranch=self.branch)
        if end_turn:
            entry = json.loads(line)
            entry["message"]["stop_reason"] = "end_turn"
            line = json.dumps(entry) + "\n"
        return self._add(line)

    def tool(self, name: str, tool_input: dict[str, Any], output: str = "", *, error: bool = False) -> str:
        """A tool use and its result; returns the tool_use id."""
        self._messages += 1
        use_id = f"toolu_{uuidlib.uuid4().hex[:20]}"
        self._add(assistant_line([{"type": "tool_use", "id": use_id, "name": name, "input": tool_input}],
                                 session_id=self.session_id,
                                 message_id=f"msg_{self.session_id[:8]}_{self._messages}", cwd=self.cwd,
                                 timestamp=self._stamp(), gitBranch=self.branch))
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": output}
        if error:
            result["is_error"] = True
        self._add(user_line([result], session_id=self.session_id, cwd=self.cwd, timestamp=self._stamp(),
                            gitBranch=self.branch))
        return use_id

    def bash(self, command: str, output: str = "", *, error: bool = False) -> str:
        return self.tool("Bash", {"command": command, "description": "run it"}, output, error=error)

    def edit(self, path: str, old: str = "a", new: str = "b") -> str:
        return self.tool("Edit", {"file_path": path, "old_string": old, "new_string": new},
                         f"The file {path} has been updated.")

    def read(self, path: str) -> str:
        return self.tool("Read", {"file_path": path}, "     1\tcontent")

    def write(self, path: str, content: str = "x") -> str:
        return self.tool("Write", {"file_path": path, "content": content}, f"File created successfully at: {path}")

    def text(self) -> str:
        return "".join(self.lines)


def write_conversations(projects: Path, *conversations: Conversation) -> None:
    """Append each conversation to its transcript where Claude Code keeps it: the projects folder, the folder
    named after the session's cwd, ``<session id>.jsonl``."""
    from processor.capture.claude import encoded_project_dir

    for c in conversations:
        folder = projects / encoded_project_dir(Path(c.cwd))
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{c.session_id}.jsonl", "a", encoding="utf-8") as f:
            f.write(c.text())
