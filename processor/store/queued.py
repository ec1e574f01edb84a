"""The SQL for messages the user typed while the agent was busy, waiting in the agent's queue.

Claude Code writes such a message on a ``queue-operation`` line of its own (``enqueue``, with the text), and later
says what became of it: ``dequeue`` (sent as the next prompt, on a user line of its own), ``remove`` (handed to
the model in the middle of its turn: no other line holds the text), ``popAll`` (taken back into the input box).
The enqueue and its fate may fall in different capture batches or processor runs, so what waits is kept here,
written in the transaction that moves the session's offset past the lines that said so: a crash between the two
loses nothing. Callers own the transaction.
"""

from __future__ import annotations

import apsw

from processor.redaction import Redacted, redacted

# The id of a message handed to the model mid-turn begins so (``capture/queued.py``): the user's words, but no new
# round of the session (its task goes on; a failure met before it and fixed after it is one lesson).
MID_TURN = "queued-"


def handed_mid_turn(uuid: str) -> bool:
    """Whether a user message reached the model in the middle of its turn (not as a prompt starting a round)."""
    return uuid.startswith(MID_TURN)


def waiting(conn: apsw.Connection, session_id: str) -> list[tuple[int | None, str, str]]:
    """The session's messages still queued, oldest first: (ts_ms, timestamp, text)."""
    rows = conn.execute("SELECT ts_ms, timestamp, text FROM queued_messages WHERE session_id = ? ORDER BY seq",
                        (session_id,))
    return [(row[0], row[1], row[2]) for row in rows]


def replace(conn: apsw.Connection, session_id: str, queue: list[tuple[int | None, str, Redacted]]) -> None:
    """What waits in the session's queue now (its texts redacted at capture)."""
    conn.execute("DELETE FROM queued_messages WHERE session_id = ?", (session_id,))
    for seq, (ts_ms, timestamp, text) in enumerate(queue):
        conn.execute("INSERT INTO queued_messages (session_id, seq, ts_ms, timestamp, text) VALUES (?, ?, ?, ?, ?)",
                     (session_id, seq, ts_ms, timestamp, redacted(text)))


def forget(conn: apsw.Connection, session_id: str) -> None:
    """Nothing of the session waits any more (it went off the record)."""
    conn.execute("DELETE FROM queued_messages WHERE session_id = ?", (session_id,))
