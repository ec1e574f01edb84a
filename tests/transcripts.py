"""Builders for transcript lines in Claude Code's format, for tests and benchmarks."""

from __future__ import annotations

import json
import uuid as uuidlib
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
