"""`memory_remember` requests as files in $ENGRAM_HOME/queue/.

Writers (the MCP server, `engram remember`) only drop a file and return at once;
the processor stores each as a manual episode and deletes the file only after
the commit, so a request survives any crash of either side.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path

from processor.clock import now_ms
from processor.files import ensure_private_dir, write_atomic
from processor.redaction import redact

log = logging.getLogger(__name__)

MAX_REMEMBER_CHARS = 20_000
SUFFIX = ".remember.json"


class BadRememberFile(ValueError):
    pass


@dataclass(frozen=True)
class RememberRequest:
    text: str
    kind: str | None = None
    scope: str | None = None
    project: str | None = None
    session_id: str | None = None


def write_remember_file(queue_dir: Path, request: RememberRequest) -> Path:
    text = redact(request.text).strip()  # the one way in: a secret never reaches the queue or the store
    if not text:
        raise ValueError("nothing to remember: the text is empty")
    if len(text) > MAX_REMEMBER_CHARS:
        raise ValueError(f"a memory holds at most {MAX_REMEMBER_CHARS} characters; this one has {len(text)}")
    ensure_private_dir(queue_dir)
    name = f"{time.time_ns()}-{uuidlib.uuid4().hex[:8]}{SUFFIX}"
    payload = {"text": text, "kind": request.kind, "scope": request.scope, "project": request.project,
               "session_id": request.session_id, "requested_at": now_ms()}
    # The processor only ever sees complete files: the temp file's name does not end in SUFFIX.
    write_atomic(queue_dir / name, json.dumps(payload))
    return queue_dir / name


def pending_remember_files(queue_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in queue_dir.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []


def read_remember_file(path: Path) -> RememberRequest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadRememberFile(f"{path}: not a readable remember request ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str) or not data["text"].strip():
        raise BadRememberFile(f"{path}: a remember request needs a non-empty \"text\" string")

    def opt(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and value else None

    return RememberRequest(data["text"][:MAX_REMEMBER_CHARS], opt("kind"), opt("scope"), opt("project"),
                           opt("session_id"))


def quarantine(path: Path, reason: str) -> Path:
    """Move a bad request aside (never silently dropped) so the user can see and fix it."""
    bad_dir = ensure_private_dir(path.parent / "rejected")
    target = bad_dir / path.name
    os.replace(path, target)
    log.warning("remember request %s rejected (%s); moved to %s", path.name, reason, target)
    return target
