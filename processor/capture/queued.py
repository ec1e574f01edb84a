"""Messages the user typed while the agent worked: which of them reached the model in the middle of its turn.

Claude Code queues what the user types during a turn on a ``queue-operation`` line of its own and says later what
became of the oldest message waiting: ``dequeue`` (sent as the next prompt: a user line of its own follows, captured
as any prompt), ``remove`` (handed to the model with the next tool result, mid-turn: **no other line holds its
text**), ``popAll`` (taken back into the input box; sent later, if at all, as a prompt). The messages handed over
mid-turn are often the user's sharpest corrections ("you dont have access to docker here", "ipfs is on docker host
- 192.168.133.114"): each becomes a user message of the session, at the time it was handed over.

The queue outlives a capture batch (``store/queued.py`` keeps it with the offset). A message handed over gets an id
made from its session, the time it was queued and its text, so the same lines read again store it once.
"""

from __future__ import annotations

import hashlib

from processor.capture.captured import CapturedLine
from processor.capture.formats import Queued
from processor.redaction import Redacted
from processor.store.queued import MID_TURN


class UserQueue:
    """One session's queue of typed messages, as a batch of its lines changes it (oldest first)."""

    def __init__(self, session_id: str, waiting: list[tuple[int | None, str, str]]) -> None:
        self.session_id = session_id
        self.waiting: list[tuple[int | None, str, Redacted]] = [
            (ts_ms, timestamp, Redacted(text)) for ts_ms, timestamp, text in waiting]
        self.changed = False

    def apply(self, operation: Queued) -> CapturedLine | None:
        """What the line does to the queue; the user message it handed to the model mid-turn, if any."""
        if operation.operation == "enqueue":
            self.waiting.append((operation.ts_ms, operation.timestamp or "", operation.text or Redacted("")))
            self.changed = True
            return None
        if operation.operation == "popAll":
            self.changed = self.changed or bool(self.waiting)
            self.waiting.clear()
            return None
        if not self.waiting:
            return None  # what it took was queued before capture began, or was Claude Code's own notification
        queued_ms, queued_at, text = self.waiting.pop(0)
        self.changed = True
        if operation.operation == "dequeue" or not text:
            return None  # sent as a prompt of its own (its line follows), or nothing typed (an image only)
        digest = hashlib.sha256(f"{self.session_id}\0{queued_at}\0{text}".encode()).hexdigest()[:32]
        at = operation.timestamp or queued_at or None
        return CapturedLine(uuid=MID_TURN + digest, session_id=self.session_id, parent_uuid=None, role="user",
                            timestamp=at, ts_ms=operation.ts_ms if operation.ts_ms is not None else queued_ms,
                            cwd=None, git_branch=None, text=text, api_message_id=None)
