"""What the user typed while Claude Code worked: the messages handed to the model mid-turn are captured, once, as
the user's words, and survive a restart between the line that queued them and the one that handed them over.

The queue lines are real (cipher-box session 2095544c, 2026-02-13: three corrections typed while the agent tried to
start Docker, handed over with its next tool result; 6a77dd8a's ``popAll``), their session id made the test's.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.claude import parse_line
from processor.capture.formats import Queued
from processor.capture.tailer import Tailer
from processor.memory.verbatim import group_rounds
from processor.store.episodes import StoredMessage
from processor.store.queued import MID_TURN, handed_mid_turn

SID = "2095544c-fa50-4027-b664-c37e578957ce"
REAL = [  # 2095544c lines 183, 194, 205 (enqueue) and 236-238 (remove), as Claude Code 2.1.39 wrote them
    '{"type":"queue-operation","operation":"enqueue","timestamp":"2026-02-13T01:56:25.575Z","sessionId":"%s",'
    '"content":"did we not go through this before, you dont have access to docker  here"}',
    '{"type":"queue-operation","operation":"enqueue","timestamp":"2026-02-13T01:56:35.169Z","sessionId":"%s",'
    '"content":"docker is running on your host."}',
    '{"type":"queue-operation","operation":"enqueue","timestamp":"2026-02-13T01:56:45.299Z","sessionId":"%s",'
    '"content":"why do you need docker for the api logs?"}',
] + ['{"type":"queue-operation","operation":"remove","timestamp":"2026-02-13T01:57:14.987Z","sessionId":"%s"}'] * 3
TYPED = ["did we not go through this before, you dont have access to docker  here",
         "docker is running on your host.", "why do you need docker for the api logs?"]


def queue_line(operation: str, timestamp: str, content: object = None) -> str:
    entry = {"type": "queue-operation", "operation": operation, "timestamp": timestamp, "sessionId": SID}
    if content is not None:
        entry["content"] = content
    return json.dumps(entry, separators=(",", ":")) + "\n"


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "-Users-michael-Code-cipher-box"
    folder.mkdir(parents=True)
    return folder / f"{SID}.jsonl"


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def user_rows(conn: apsw.Connection) -> list[tuple[str, str, str]]:
    return [tuple(r) for r in conn.execute("SELECT uuid, timestamp, text FROM messages WHERE role = 'user' "
                                           "ORDER BY id")]


def test_messages_handed_over_mid_turn_are_captured_once_in_order(conn: apsw.Connection, transcript: Path) -> None:
    append(transcript, user_line("Start the API and get me a JWT", session_id=SID, uid="u-prompt",
                                 timestamp="2026-02-13T01:55:00.000Z"))
    append(transcript, assistant_line([{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                        "input": {"command": "docker compose up -d"}}],
                                      session_id=SID, timestamp="2026-02-13T01:55:10.000Z"))
    append(transcript, "".join(line % SID + "\n" for line in REAL))
    append(transcript, assistant_line("You're right — sorry for the detour.", session_id=SID, message_id="msg_2",
                                      timestamp="2026-02-13T01:57:20.000Z"))
    result = Tailer(conn).tail(transcript)
    rows = user_rows(conn)
    assert [text for _, _, text in rows] == ["Start the API and get me a JWT", *TYPED]
    assert all(handed_mid_turn(uuid) for uuid, _, _ in rows[1:]) and not handed_mid_turn(rows[0][0])
    assert {timestamp for _, timestamp, _ in rows[1:]} == {"2026-02-13T01:57:14.987Z"}  # when the model got them
    assert [c.text for c in result.captured if c.role == "user"][1:] == TYPED
    assert conn.execute("SELECT count(*) FROM queued_messages").fetchone()[0] == 0  # nothing waits any more

    # The same lines read again (a rewritten file is read from its start) store nothing twice.
    transcript.write_text(transcript.read_text())
    Tailer(conn).tail(transcript)
    assert [text for _, _, text in user_rows(conn)] == ["Start the API and get me a JWT", *TYPED]


def test_a_message_queued_before_a_restart_is_captured_when_handed_over_after_it(
        conn: apsw.Connection, transcript: Path) -> None:
    append(transcript, user_line("Start the API", session_id=SID, timestamp="2026-02-13T01:55:00.000Z"))
    append(transcript, REAL[1] % SID + "\n")
    Tailer(conn).tail(transcript)  # the offset moves past the enqueue: the text waits in the store
    assert [row[0] for row in conn.execute("SELECT text FROM queued_messages")] == ["docker is running on your host."]
    append(transcript, REAL[3] % SID + "\n")
    Tailer(conn).tail(transcript)  # a new tailer: a processor restarted in between, with no reader in memory
    assert [text for _, _, text in user_rows(conn)] == ["Start the API", "docker is running on your host."]


def test_sent_taken_back_or_not_typed_is_not_captured_from_the_queue(conn: apsw.Connection, transcript: Path) -> None:
    append(transcript, user_line("Run the e2e suite", session_id=SID, timestamp="2026-02-16T12:50:00.000Z"))
    # Claude Code's own notice of a background task: queued for the model, never dequeued in the user's order.
    append(transcript, queue_line("enqueue", "2026-02-16T12:55:00.000Z",
                                  "<task-notification>\n<task-id>b8ee8c9</task-id>\n<status>completed</status>"))
    append(transcript, queue_line("enqueue", "2026-02-16T12:57:00.000Z", "what is happening?"))
    append(transcript, queue_line("popAll", "2026-02-16T13:01:53.777Z", "what is happening?"))  # back in the box
    append(transcript, queue_line("enqueue", "2026-02-16T13:02:00.000Z", [{"type": "text", "text": "commit it"}]))
    append(transcript, queue_line("dequeue", "2026-02-16T13:02:05.000Z"))
    append(transcript, user_line("commit it", session_id=SID, timestamp="2026-02-16T13:02:05.100Z"))
    append(transcript, queue_line("enqueue", "2026-02-16T13:03:35.142Z"))  # no text (an image): takes its place
    append(transcript, queue_line("enqueue", "2026-02-16T13:03:40.000Z", "ipfs is on the host 192.168.133.114"))
    append(transcript, queue_line("remove", "2026-02-16T13:03:38.000Z"))
    append(transcript, queue_line("remove", "2026-02-16T13:04:00.000Z"))
    Tailer(conn).tail(transcript)
    assert [text for _, _, text in user_rows(conn)] == ["Run the e2e suite", "commit it",
                                                        "ipfs is on the host 192.168.133.114"]


def test_a_secret_typed_mid_turn_is_redacted_in_the_queue_and_the_message(
        conn: apsw.Connection, transcript: Path) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    append(transcript, user_line("Push the branch", session_id=SID, timestamp="2026-02-13T01:55:00.000Z"))
    append(transcript, queue_line("enqueue", "2026-02-13T01:56:00.000Z", f"use the token {secret}"))
    Tailer(conn).tail(transcript)
    waiting = conn.execute("SELECT text FROM queued_messages").fetchone()[0]
    assert "use the token" in waiting and secret not in waiting
    append(transcript, queue_line("remove", "2026-02-13T01:56:10.000Z"))
    Tailer(conn).tail(transcript)
    said = user_rows(conn)[-1][2]
    assert said.startswith("use the token") and secret not in said


def test_an_unknown_queue_operation_is_one_clear_problem() -> None:
    outcome = parse_line(queue_line("shuffle", "2026-02-13T01:56:00.000Z").strip().encode())
    assert not isinstance(outcome, Queued) and outcome.problem and "shuffle" in outcome.reason


def test_a_message_handed_over_mid_turn_is_in_the_round_it_was_said_in() -> None:
    """A failure met before the user's interjection and fixed after it is one round's: one lesson."""
    messages = [StoredMessage(1, "u-1", "user", "Start the API", 1), StoredMessage(2, "a-1", "assistant", "…", 2),
                StoredMessage(3, MID_TURN + "0" * 32, "user", "docker is running on your host.", 3),
                StoredMessage(4, "a-2", "assistant", "Restarting with DB_HOST set.", 4),
                StoredMessage(5, "u-2", "user", "Now log in", 5)]
    rounds = group_rounds(messages, final=True)
    assert [[m.id for m in r] for r in rounds] == [[1, 2, 3, 4], [5]]
