"""A memory's lesson as it travels (processor/share/lessons.py): what a pulled one must hold, what is kept of it,
where its paths land, and what leaves a machine — on a real store, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processor.share import lessons
from processor.share.lessons import BadLesson
from processor.share.postgres.statements import PulledRow
from processor.share.pull import Refused, check
from processor.store import failures as failures_sql
from processor.store import open_store, write_transaction
from processor.store import origins as origins_sql
from processor.store import sessions as sessions_sql
from processor.store import share as share_sql

FAILURE = {"key": "fail:pytest", "call": "cmd:pytest", "signature": ["e modulenotfounderror no module named app"],
           "fix": "`pip install -e .`, then `pytest` again", "uses": ["pip", "install", "-e", "."],
           "sessions": {"s-1": 1_795_000_000_000}, "first_ms": 1_795_000_000_000, "last_ms": 1_795_000_000_000}


def pulled(lesson: object, **fields: object) -> PulledRow:
    values = dict(id="ep_fix1", owner="alice", machine_id="m_a", changed_by="m_a", seq=7, team=None,
                  project_key="github.com/Org/App", project="/home/alice/app", session_id="s-1", scope="project",
                  kind="gotcha", importance="normal", source_type="auto", status="active", summary="`pytest` failed",
                  full_content="`pytest` failed: No module named app",
                  entities=["$ pytest", "/home/alice/app/setup.py"],
                  source_uuids=[], content_hash="h", superseded_by=None, created_at=1, valid_from=1, valid_to=None,
                  forgotten_reason=None, embedding=None, embedding_model=None, lesson=lesson)
    values.update(fields)
    return PulledRow(**values)


def test_a_lesson_with_fields_this_version_does_not_know_is_read_by_the_ones_it_knows() -> None:
    newer = {"v": 3, "miner": "error_fix", "agent": "codex", "machines": ["m_a"], "told": {"at": ["after"]},
             "failure": {**FAILURE, "exit_codes": [1, 4]}}
    lesson = lessons.parse(newer)
    assert lesson is not None and lesson.raw == newer  # kept whole
    assert lesson.miner == "error_fix" and lesson.agent == "codex" and lesson.failure is not None
    assert lesson.failure.key == "fail:pytest" and lesson.failure.uses == ["pip", "install", "-e", "."]
    assert lessons.parse(None) is None  # an older client's memory


@pytest.mark.parametrize(("lesson", "why"), [
    ([1, 2], "is not an object"),
    ({"miner": "Error Fix!"}, "miner 'Error Fix!' is not a name"),
    ({"failure": {**FAILURE, "key": "cmd:pytest"}}, "failure.key is not a failure key"),
    ({"failure": {**FAILURE, "signature": []}}, "failure.signature is empty"),
    ({"failure": {**FAILURE, "sessions": {"s-1": "yesterday"}}}, "failure.sessions is not an object of sessions"),
    ({"failure": {**FAILURE, "uses": "pip install"}}, "failure.uses is not a list"),
    ({"machines": "m_a"}, "machines is not a list"),
    ({"failure": {**FAILURE, "fix": "x" * 70_000}}, "is over 65536 bytes"),
])
def test_a_lesson_whose_known_fields_are_wrong_refuses_its_row(lesson: object, why: str) -> None:
    with pytest.raises(BadLesson, match=why):
        lessons.parse(lesson)
    with pytest.raises(Refused, match="its lesson " + why):
        check(pulled(lesson), "all-MiniLM-L6-v2", 384, {})


def test_a_pulled_memorys_paths_move_under_this_machines_clone() -> None:
    checked = check(pulled({"miner": "error_fix"}), "all-MiniLM-L6-v2", 384, {"github.com/Org/App": "/src/app"})
    assert checked.replica is not None and checked.replica.project == "/src/app"
    assert checked.replica.entities == ["$ pytest", "/src/app/setup.py"]
    elsewhere = check(pulled(None), "all-MiniLM-L6-v2", 384, {})  # no clone here: where it was made
    assert elsewhere.replica is not None and elsewhere.replica.entities[1] == "/home/alice/app/setup.py"
    assert lessons.moved(["cd /home/alice/app && make", "/home/alice/apparel/x", "/srv/home/alice/app/y"],
                         "/home/alice/app", "/src/app") == \
        ["cd /src/app && make", "/home/alice/apparel/x", "/srv/home/alice/app/y"]


def test_what_leaves_keeps_what_other_machines_sent_and_says_what_is_known_here(tmp_path: Path) -> None:
    conn = open_store(tmp_path / "engram.db")
    try:
        with write_transaction(conn):
            origins_sql.set_origin(conn, "ep_fix1", "error_fix")
            row = failures_sql.add_known(conn, "/src/app", "fail:pytest", "cmd:pytest", FAILURE["signature"],
                                         {"s-1": 5, "s-local": 9}, 5, 9)
            failures_sql.relink(conn, row.id, "ep_fix1", FAILURE["fix"], FAILURE["uses"])
            share_sql.save_lesson(conn, "ep_fix1", json.dumps({"v": 3, "told": {"at": ["after"]},
                                                               "machines": ["m_a"], "failure": {"exit_codes": [1]}}))
            sessions_sql.upsert_session(conn, session_id="s-local", transcript_path="/x.jsonl", project="/src/app",
                                        checkout="/src/app", inode=1, byte_offset=0, last_line_hash=None,
                                        last_line_len=0, last_activity=9, now_ms=9, agent="codex")
        [(memory_id, text)] = lessons.outgoing(conn, ["ep_fix1", "ep_other"], "m_b").items()
    finally:
        conn.close()
    sent = json.loads(text)
    assert memory_id == "ep_fix1" and sent["v"] == 3 and sent["told"] == {"at": ["after"]}
    assert sent["miner"] == "error_fix" and sent["machines"] == ["m_a", "m_b"]  # met here too
    assert "agent" not in sent  # its own session is not here: the agent is the one the lesson came with, if any
    assert sent["failure"]["exit_codes"] == [1] and sent["failure"]["sessions"] == {"s-1": 5, "s-local": 9}
    assert sent["failure"]["fix"] == FAILURE["fix"] and sent["failure"]["key"] == "fail:pytest"
