"""Episodes, verbatim rounds, hybrid search and the memory CLI, on a real DB with the real GGUF model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import apsw
import numpy as np
import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.tailer import Tailer
from processor.config import load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import Episodizer
from processor.memory.errors import EmbedderError, EmbeddingMismatch, UnknownEpisode
from processor.memory.search import VectorIndex, fts_query
from processor.memory.verbatim import (
    SUMMARY_TOKENS,
    TASK_HEADER_CHARS,
    estimate_tokens,
    group_rounds,
    round_pieces,
    split_task_header,
)
from processor.recall.format import format_expansion, format_hits
from processor.store import episodes as sql
from processor.store import open_store, write_transaction
from processor.store.episodes import StoredMessage
from tests.conftest import REPO, run_engram

SID = "eeeeeeee-0000-0000-0000-000000000005"


@pytest.fixture
def store(engram_home: Path) -> EpisodeStore:
    settings = load_settings()
    conn = open_store(settings.db_path)
    yield EpisodeStore(settings, conn)
    conn.close()


def msg(i: int, role: str, text: str) -> StoredMessage:
    return StoredMessage(i, f"u{i}", role, text, 1_700_000_000_000 + i)


def test_rounds_pair_each_user_message_with_the_replies_that_follow() -> None:
    messages = [msg(1, "assistant", "leftover"), msg(2, "user", "q1"), msg(3, "assistant", "a1"),
                msg(4, "assistant", "a1b"), msg(5, "user", "q2"), msg(6, "assistant", "a2")]
    rounds = group_rounds(messages, final=False)
    assert [[m.uuid for m in r] for r in rounds] == [["u1"], ["u2", "u3", "u4"]]  # the last round may grow
    assert len(group_rounds(messages, final=True)) == 3


def test_long_rounds_split_and_summaries_stay_within_budget() -> None:
    round_messages = [msg(1, "user", "Why does the deploy fail on Fridays? " * 5), msg(2, "assistant", "x" * 5000)]
    pieces = round_pieces(round_messages, max_chars=1200)
    # 5,000 characters of reply in pieces that also carry the task header: five or six pieces.
    assert 5 <= len(pieces) <= 6
    # Each piece's own text within the budget; the task header (at most TASK_HEADER_CHARS) on top of it.
    assert all(len(split_task_header(p.full_content)[1]) <= 1200 for p in pieces)
    assert all(len(split_task_header(p.full_content)[0]) <= TASK_HEADER_CHARS for p in pieces)
    assert all(estimate_tokens(p.summary) <= SUMMARY_TOKENS for p in pieces)
    assert pieces[0].summary.startswith("Why does the deploy fail on Fridays?")
    assert pieces[0].source_uuids[0] == "u1" and pieces[-1].source_uuids == ["u2"]
    assert all(p.full_content.startswith("task: Why does the deploy fail on Fridays?") for p in pieces[1:])
    assert "".join(p.full_content.split("assistant: ", 1)[-1] for p in pieces).count("x") == 5000  # nothing lost
    assert len({p.id for p in pieces}) == len(pieces)
    assert round_pieces(round_messages, 1200)[0].id == pieces[0].id  # deterministic: a redo is a no-op


def test_a_continuation_bite_starts_where_its_piece_starts() -> None:
    reply = ("[tool: Bash] ran the suite. " + "word " * 300 + "Second half: the cache key now includes the locale, "
             + "and more " * 200)
    pieces = round_pieces([msg(1, "user", "Fix the cache"), msg(2, "assistant", reply)], max_chars=1200)
    assert len(pieces) > 2
    for index, piece in enumerate(pieces[1:], 2):
        # "(part N) <the task> → <the piece's own opening>": the task first, then where the piece starts.
        assert piece.summary.startswith(f"(part {index}) Fix the cache → ")
        opening = piece.full_content.split("\n\n", 1)[1].removeprefix("assistant: ").removeprefix("user: ")
        body = piece.summary.split(" → ", 1)[1].rstrip("…")
        flat = " ".join(opening.replace("[tool: Bash]", " ").split())
        assert flat.startswith(body), (piece.summary, piece.full_content[:80])
    # A piece that opens with a fresh speaker block drops only the label, never the message's own opening.
    pieces = round_pieces([msg(1, "user", "Why? " * 236), msg(2, "assistant", "ran it. pytest -q: 3 failed")],
                          max_chars=1200)
    assert pieces[-1].full_content.endswith("\n\nassistant: ran it. pytest -q: 3 failed")
    assert pieces[-1].summary == "(part 2) Why? Why? → ran it. pytest -q: 3 failed"


def test_fts_query_is_safe_for_any_input() -> None:
    assert fts_query('what is "NEAR" (the) AND OR * ^ deploy-script?') == '"near" OR "deploy" OR "script"'
    assert fts_query("") == ""
    assert fts_query("x" * 100_000).count('"') == 2


def test_vector_index_appends_and_returns_the_nearest() -> None:
    index = VectorIndex(4)
    vectors = np.eye(4, dtype=np.float32)
    for i in range(3000):  # grows past its first capacity
        index.add([i + 1], vectors[i % 4])
    top = index.top(np.array([0, 1, 0, 0], dtype=np.float32), 3)
    assert len(top) == 3 and all(rowid % 4 == 2 for rowid, _ in top) and top[0][1] == pytest.approx(1.0)


def capture(store: EpisodeStore, transcript: Path, *lines: str) -> None:
    with open(transcript, "a") as f:
        f.writelines(lines)
    Tailer(store.conn).tail(transcript)


def test_captured_rounds_become_searchable_episodes_with_provenance(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    capture(store, transcript,
            user_line("The staging database keeps timing out after the migration", session_id=SID, uid="q1",
                      cwd="/work/shop"),
            assistant_line("Raised the pool size to 20 in db/config.py; timeouts stopped.", session_id=SID,
                           uid="a1", cwd="/work/shop"),
            user_line("Now make the invoice PDF use the company logo", session_id=SID, uid="q2", cwd="/work/shop"),
            assistant_line("Added the logo to templates/invoice.html.", session_id=SID, uid="a2", message_id="m2",
                           cwd="/work/shop"))
    assert Episodizer(store).episodize(SID) == 1  # the second round is not complete yet
    assert Episodizer(store).episodize(SID, final=True) == 1
    assert Episodizer(store).episodize(SID, final=True) == 0
    hits = store.recall("why is the database slow to connect", project="/work/shop")
    assert hits[0].bite.startswith("The staging database keeps timing out")
    expansion = store.expand(hits[0].id)
    assert "pool size to 20" in expansion.full_content
    assert [m["uuid"] for m in expansion.source_messages] == ["q1", "a1"]
    assert expansion.session_id == SID
    assert "From session" in format_expansion(expansion)
    assert store.recall("invoice logo", project="/elsewhere") == []  # other projects' episodes stay out
    row = store.conn.execute("SELECT access_count FROM episodes WHERE id = ?", (hits[0].id,)).fetchone()
    assert row[0] == 1  # only the expand counts as a use; being returned by recall does not


def test_recall_does_not_feed_its_own_ranking(store: EpisodeStore, tmp_path: Path) -> None:
    for topic in ("retries use exponential backoff capped at 30 seconds",
                  "retries are disabled for POST requests to stay idempotent",
                  "the retry budget is shared per host across workers"):
        store.remember(f"HTTP client: {topic}", scope="global", kind="convention")
    query = "how do HTTP retries work"
    first = [h.id for h in store.recall(query)]
    for _ in range(100):
        store.recall(query)
    assert [h.id for h in store.recall(query)] == first
    assert store.conn.execute("SELECT max(access_count) FROM episodes").fetchone()[0] == 0
    store.expand(first[-1])
    assert store.conn.execute("SELECT access_count FROM episodes WHERE id = ?", (first[-1],)).fetchone()[0] == 1


def test_cli_recall_json_carries_source_uuids(engram_home: Path, projects_dir: Path) -> None:
    folder = projects_dir / "-work-shop"
    folder.mkdir()
    (folder / f"{SID}.jsonl").write_text(
        user_line("Why does the nightly export job crash?", session_id=SID, uid="q1", cwd="/work/shop")
        + assistant_line("The export ran out of memory; it now streams rows in batches of 500.", session_id=SID,
                         uid="a1", cwd="/work/shop"))
    run_engram("backfill")
    [hit] = json.loads(run_engram("recall", "nightly export crash", "--json", "--limit", "1").stdout)
    assert hit["source_uuids"] == ["q1", "a1"]


def test_same_session_messages_not_yet_episodes_are_found(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    capture(store, transcript,
            user_line("Remember that the feature flag is called turbo_checkout", session_id=SID, cwd="/w"))
    hits = store.recall("what is the feature flag called", session_id=SID, project="/w")
    assert hits and hits[0].source == "message" and "turbo_checkout" in hits[0].bite
    assert "turbo_checkout" in store.expand(hits[0].id).full_content


def test_remember_skips_exact_duplicates_and_ranks_high_importance(store: EpisodeStore) -> None:
    first, created = store.remember("Always use uv, never pip, in this repo", kind="preference", scope="global")
    assert created
    again, created_again = store.remember("  always use UV, never pip, in this repo ", kind="preference")
    assert (again, created_again) == (first, False)
    store.remember("The office coffee machine is on the third floor", kind="fact", scope="global")
    hits = store.recall("how should I install python packages")
    assert hits[0].id == first and hits[0].importance == "high"
    assert format_hits(hits).startswith("[1] (")


@pytest.mark.parametrize("query", ["", "   ", "deploy " * 20_000])
def test_empty_and_huge_queries(store: EpisodeStore, query: str) -> None:
    store.remember("Deploys go through the release branch", kind="convention", scope="global")
    hits = store.recall(query)
    assert hits == [] if not query.strip() else hits[0].bite.startswith("Deploys go")


def test_unknown_and_forgotten_ids(store: EpisodeStore) -> None:
    episode_id, _ = store.remember("The VPN password rotates monthly", scope="global")
    with pytest.raises(UnknownEpisode, match="no memory with id 'ep_nope'"):
        store.expand("ep_nope")
    store.forget(episode_id)
    with pytest.raises(UnknownEpisode, match="was forgotten"):
        store.expand(episode_id)
    assert store.recall("VPN password") == []
    with pytest.raises(UnknownEpisode):
        store.forget("ep_nope")


def test_model_missing_corrupt_or_mismatched(engram_home: Path, tmp_path: Path) -> None:
    missing = load_settings(env={"ENGRAM_HOME": str(engram_home), "ENGRAM_EMBEDDING_MODEL": str(tmp_path / "no.gguf")})
    conn = open_store(missing.db_path)
    with pytest.raises(EmbedderError, match=str(tmp_path / "no.gguf")):
        EpisodeStore(missing, conn).recall("anything")
    corrupt_file = tmp_path / "corrupt.gguf"
    corrupt_file.write_bytes(b"GGUF" + bytes(range(256)) * 10)
    corrupt = load_settings(env={"ENGRAM_HOME": str(engram_home), "ENGRAM_EMBEDDING_MODEL": str(corrupt_file)})
    with pytest.raises(EmbedderError, match="corrupt"):
        EpisodeStore(corrupt, conn).recall("anything")

    good = EpisodeStore(load_settings(), conn)
    good.remember("Stored with the default model", scope="global")
    with write_transaction(conn):
        sql.set_meta(conn, "embedding_model", "nomic-embed-text-v1.5")
        sql.set_meta(conn, "embedding_dim", "768")
    with pytest.raises(EmbeddingMismatch, match="engram reindex"):
        EpisodeStore(load_settings(), conn).recall("default model")
    assert EpisodeStore(load_settings(), conn).reindex() == 1
    assert EpisodeStore(load_settings(), conn).recall("default model")
    conn.close()


def test_reads_do_not_fail_while_another_process_writes(store: EpisodeStore) -> None:
    store.remember("Busy databases must not break recall", scope="global")
    db = store.settings.db_path
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import apsw, time\n"
         f"c = apsw.Connection({str(db)!r}); c.execute('BEGIN IMMEDIATE')\n"
         "c.execute(\"UPDATE episodes SET access_count = access_count\")\n"
         "print('locked', flush=True); time.sleep(1.5); c.execute('COMMIT')\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        hits = store.recall("busy database recall")
        assert hits and hits[0].bite.startswith("Busy databases")
    finally:
        holder.wait(timeout=30)


def test_cli_recall_expand_forget_remember_reindex(engram_home: Path, projects_dir: Path) -> None:
    env = {"ENGRAM_HOME": str(engram_home), "ENGRAM_PROJECTS_DIR": str(projects_dir)}
    queued = run_engram("remember", "Releases are cut on Tuesdays", "--kind", "convention", "--scope", "global",
                        env=env)
    assert "queued" in queued.stdout
    assert len(list((engram_home / "queue").glob("*.remember.json"))) == 1
    run_engram("run", "--once", env=env)  # the processor stores it and deletes the file after the commit
    assert list((engram_home / "queue").glob("*.remember.json")) == []
    hits = json.loads(run_engram("recall", "when are releases made", "--json", env=env).stdout)
    assert hits[0]["bite"] == "Releases are cut on Tuesdays"
    episode_id = hits[0]["id"]
    assert "Releases are cut on Tuesdays" in run_engram("expand", episode_id, env=env).stdout
    assert "re-embedded 1 episodes" in run_engram("reindex", env=env).stdout
    assert "forgot" in run_engram("forget", episode_id, env=env).stdout
    gone = run_engram("expand", episode_id, env=env, check=False)
    assert gone.returncode == 1 and "was forgotten" in gone.stderr
    unknown = run_engram("expand", "ep_missing", env=env, check=False)
    assert unknown.returncode == 1 and "no memory with id" in unknown.stderr and "Traceback" not in unknown.stderr


def test_bad_remember_files_are_set_aside_not_dropped(engram_home: Path, projects_dir: Path) -> None:
    queue_dir = engram_home / "queue"
    queue_dir.mkdir(parents=True)
    (queue_dir / "1-bad.remember.json").write_text("{not json")
    (queue_dir / "2-empty.remember.json").write_text(json.dumps({"text": "  "}))
    run_engram("run", "--once", env={"ENGRAM_HOME": str(engram_home), "ENGRAM_PROJECTS_DIR": str(projects_dir)})
    assert sorted(p.name for p in (queue_dir / "rejected").iterdir()) == ["1-bad.remember.json",
                                                                          "2-empty.remember.json"]
    assert "rejected" in (engram_home / "logs" / "engram.log").read_text()


def test_the_running_processor_stores_remember_files_promptly(engram_home: Path, projects_dir: Path) -> None:
    env = {"ENGRAM_HOME": str(engram_home), "ENGRAM_PROJECTS_DIR": str(projects_dir), "ENGRAM_HTTP_PORT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO,
                            env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    try:
        run_engram("remember", "Staging lives at staging.example.internal", "--scope", "global", env=env)
        deadline = time.monotonic() + 30
        while list((engram_home / "queue").glob("*.remember.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list((engram_home / "queue").glob("*.remember.json")) == []
        conn = apsw.Connection(str(engram_home / "engram.db"))
        assert conn.execute("SELECT source_type FROM episodes").fetchall() == [("manual",)]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
