"""Forget and opt out, in session: memory_forget and `engram forget --query/--before/--dry-run` erase a memory
and keep it out of every recollection and the digest; a session opts out of memory with a typed marker (not
one quoted in a code block) or ENGRAM_OFF, and "off the record" drops what it captured and never captures
it again, even after a restart. Real SQLite, the real embedding model, the real hooks as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from bench.testbed.transcripts import assistant_line, user_line
from mcp_tools.server import build_server
from processor.capture.optout import env_level, marker_level
from processor.capture.tailer import Tailer
from processor.config import Settings, SettingsHolder, load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import Episodizer
from processor.recall import forget, recollections
from processor.recall.digest import hook_output
from processor.recall.recollections import RecollectionWriter, drop_bites, record_opt_out, requested_opt_out
from processor.store import episodes as episodes_sql
from processor.store import open_store
from processor.store import sessions as sessions_sql
from recall_hook import pretooluse
from tests.conftest import REPO, run_engram

SID = "c0ffee00-0000-4000-8000-000000000001"
OTHER = "c0ffee00-0000-4000-8000-000000000002"
PROJECT = "/tmp/project"
MEMORIES = {
    "db": "The staging database is PostgreSQL 16 behind pgbouncer on port 6543; connect via the bastion",
    "deploy": "Deploys go out with make release from the main branch; never deploy on Fridays",
    "brand": "The marketing site uses Tailwind CSS and the brand colour is orange",
}


def iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


@pytest.fixture
def settings(engram_home: Path) -> Settings:
    return load_settings()


@pytest.fixture
def store(settings: Settings) -> EpisodeStore:
    conn = open_store(settings.db_path)
    yield EpisodeStore(SettingsHolder(settings), conn)
    conn.close()


@pytest.fixture
def ids(store: EpisodeStore) -> dict[str, str]:
    return {key: store.remember(text, kind="decision", scope="global", importance="high")[0]
            for key, text in MEMORIES.items()}


# ------------------------------------------------------------------------------- the markers


@pytest.mark.parametrize("prompt, level", [
    ("[engram off] let's try something risky", "memory"),
    ("please [Engram:Off] for this one", "memory"),
    ("[engram off the record] this is confidential", "record"),
    ("[engram:off-the-record]", "record"),
    ("[engram off] and then [engram off the record]", "record"),
    ("plain prompt about engram and being off", None),
    ("```\n[engram off the record]\n```\nwhy does this README line matter?", None),
    ("~~~text\n[engram off]\n~~~", None),
    ("what does `[engram off]` do?", None),
    ("> [engram off the record]\n> quoted from the docs\nexplain this", None),
    ('the docs say "type [engram off] to opt out" — is that right?', None),
    ("```\n[engram off the record]\n```\nok, now for real: [engram off]", "memory"),
    ("unclosed fence\n```\n[engram off]", None),
])
def test_a_marker_counts_only_in_the_users_own_words(prompt: str, level: str | None) -> None:
    assert marker_level(prompt) == level


def test_the_environment_variable() -> None:
    assert [env_level(v) for v in (None, "", "0", "false", "1", "yes", "memory", "record", "off-the-record")] == [
        None, None, None, None, "memory", "memory", "memory", "record", "record"]


# ------------------------------------------------------------------------------- capture honours it


def transcript(root: Path, session_id: str, *lines: str) -> Path:
    path = root / "-tmp-project" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(lines))
    return path


def captured(store: EpisodeStore, session_id: str) -> list[str]:
    return [m.text for m in episodes_sql.messages_after(store.conn, session_id, 0)]


def test_the_marker_stops_memory_but_capture_continues(store: EpisodeStore, tmp_path: Path) -> None:
    notified = []
    tailer = Tailer(store.conn, opt_out_listeners=[notified.append])
    path = transcript(tmp_path, SID, user_line("first question about the database", session_id=SID),
                      assistant_line("an answer", session_id=SID, message_id="m1"))
    tailer.tail(path)
    assert sessions_sql.session_opt_out(store.conn, SID) is None and not notified
    transcript(tmp_path, SID, user_line("[engram off] now without memory please", session_id=SID),
               assistant_line("sure", session_id=SID, message_id="m2"))
    result = tailer.tail(path)
    assert result.opt_out == "memory" and result.opted_out_now and notified == [result]
    assert sessions_sql.session_opt_out(store.conn, SID) == "memory"
    transcript(tmp_path, SID, user_line("and a later question", session_id=SID))
    assert not tailer.tail(path).opted_out_now  # recorded once
    assert captured(store, SID)[-1] == "and a later question"  # capture continues


def test_a_quoted_marker_changes_nothing(store: EpisodeStore, tmp_path: Path) -> None:
    path = transcript(tmp_path, SID, user_line("Is this right?\n```\n[engram off the record]\n```", session_id=SID))
    Tailer(store.conn).tail(path)
    assert sessions_sql.session_opt_out(store.conn, SID) is None
    assert captured(store, SID) == ["Is this right?\n```\n[engram off the record]\n```"]


def test_off_the_record_drops_the_session_and_never_captures_it_again(
        store: EpisodeStore, settings: Settings, tmp_path: Path, ids: dict[str, str]) -> None:
    path = transcript(tmp_path, SID,
                      user_line("the api key is sk-ant-api03-" + "x" * 40, session_id=SID, timestamp=iso_now()),
                      assistant_line("noted, confidential plans", session_id=SID, message_id="m1"))
    other = transcript(tmp_path, OTHER, user_line("another session's words", session_id=OTHER))
    Tailer(store.conn).tail(path)
    Tailer(store.conn).tail(other)
    assert Episodizer(store).episodize(final=True) >= 2
    mine = episodes_sql.newest_session_episode_ids(store.conn, SID, 10)
    assert mine
    # An earlier recollection in another session offered one of this session's episodes.
    folder = settings.recollections_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{OTHER}.json").write_text(json.dumps({"messageUuid": "u", "timestamp": 1, "bites": [
        {"id": next(iter(mine)), "bite": "x", "date": "2026-11-01", "importance": "normal"},
        {"id": ids["db"], "bite": "y", "date": "2026-11-01", "importance": "high"}]}))

    results = []
    tailer = Tailer(store.conn, opt_out_listeners=[results.append])
    transcript(tmp_path, SID, user_line("[engram off the record] forget all this", session_id=SID))
    tailer.tail(path)
    [result] = results
    assert result.opt_out == "record" and set(result.dropped_episodes) == mine
    record_opt_out(folder, SID, result.opt_out)  # what the processor does next (run_loop._on_opt_out)
    drop_bites(folder, set(result.dropped_episodes))
    assert captured(store, SID) == []
    for episode_id in mine:
        episode = episodes_sql.get_episode(store.conn, episode_id)
        assert episode.status == "forgotten" and episode.full_content == "" and "sk-ant" not in episode.summary
    assert store.conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'confidential'"
                              ).fetchone()[0] == 0
    assert captured(store, OTHER) == ["another session's words"]  # other sessions untouched
    assert [b["id"] for b in json.loads((folder / f"{OTHER}.json").read_text())["bites"]] == [ids["db"]]
    assert (folder / f"{SID}.off").read_text() == "record"

    # Later lines, and a processor restarted from scratch (a new Tailer, the file re-read): nothing.
    transcript(tmp_path, SID, user_line("more secrets after the marker", session_id=SID),
               assistant_line("still listening", session_id=SID, message_id="m3"))
    tailer.tail(path)
    store.conn.execute("UPDATE sessions SET byte_offset = 0, last_line_hash = NULL WHERE session_id = ?", (SID,))
    Tailer(store.conn).tail(path)
    assert captured(store, SID) == []
    assert sessions_sql.session_opt_out(store.conn, SID) == "record"


def test_env_off_the_record_reaches_the_processor_through_the_session_start_hook(
        store: EpisodeStore, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_OFF", "record")
    event = {"session_id": SID, "cwd": PROJECT, "hook_event_name": "SessionStart", "source": "startup"}
    assert hook_output(event, str(settings.home)) is None  # no digest
    assert requested_opt_out(settings.recollections_dir, SID) == "record"
    path = transcript(tmp_path, SID, user_line("nothing of this is kept", session_id=SID))
    Tailer(store.conn, opt_out_request=lambda sid: requested_opt_out(settings.recollections_dir, sid)).tail(path)
    assert captured(store, SID) == [] and sessions_sql.session_opt_out(store.conn, SID) == "record"


# ------------------------------------------------------------------------------- no digest, no bites


def test_an_opted_out_session_gets_no_digest_and_no_bites(
        store: EpisodeStore, settings: Settings, tmp_path: Path, ids: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    event = {"session_id": SID, "cwd": PROJECT, "hook_event_name": "SessionStart", "source": "resume"}
    assert MEMORIES["db"][:30] in hook_output(event, str(settings.home))
    path = transcript(tmp_path, SID, user_line("How do I connect to the staging database? [engram off]",
                                               session_id=SID, timestamp=iso_now()))
    results = []
    tailer = Tailer(store.conn, opt_out_listeners=[results.append])
    result = tailer.tail(path)
    # The writer sees the opt-out committed with the line and writes nothing for the session.
    writer = RecollectionWriter(SettingsHolder(settings))
    assert writer.handle(store, SID, result.captured[0]) is None
    assert not (settings.recollections_dir / f"{SID}.json").exists()
    assert hook_output(event, str(settings.home)) is None  # resume, compact: no digest from the database's record
    record_opt_out(settings.recollections_dir, SID, "memory")
    assert hook_output({**event, "session_id": OTHER}, str(settings.home)) is not None  # other sessions still get one
    # ENGRAM_OFF in Claude Code's environment: no digest for any session.
    monkeypatch.setenv("ENGRAM_OFF", "1")
    assert hook_output({**event, "session_id": OTHER}, str(settings.home)) is None
    assert requested_opt_out(settings.recollections_dir, OTHER) is None  # memory only: nothing to record


def run_pretooluse(settings: Settings, session_id: str, **env: str) -> bytes:
    stdin = json.dumps({"session_id": session_id, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                        "tool_input": {"command": "ls"}}).encode()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", pretooluse.LAUNCHER,
                           str(REPO / "recall_hook" / "pretooluse.py")], input=stdin, capture_output=True,
                          env={"PATH": os.environ.get("PATH", ""), "ENGRAM_HOME": str(settings.home), **env},
                          timeout=30)
    assert done.returncode == 0 and done.stderr == b""
    return done.stdout


def test_the_pretooluse_hook_honours_both_forms(settings: Settings) -> None:
    folder = settings.recollections_dir
    folder.mkdir(parents=True, exist_ok=True)
    bite = {"id": "ep_1", "bite": "a memory", "date": "2026-11-01", "importance": "high"}
    for n, session_id in enumerate((SID, OTHER)):
        (folder / f"{session_id}.json").write_text(json.dumps({"messageUuid": f"m{n}", "timestamp": 1,
                                                               "bites": [bite]}))
    assert run_pretooluse(settings, SID, ENGRAM_OFF="1") == b""
    (folder / f"{SID}.off").write_text("memory")  # written just after this recollection: it must not slip out
    assert run_pretooluse(settings, SID) == b""
    assert b"ep_1" in run_pretooluse(settings, OTHER)


# ------------------------------------------------------------------------------- forgetting


def test_forget_erases_the_memory_its_versions_and_its_bites(
        store: EpisodeStore, settings: Settings, ids: dict[str, str]) -> None:
    new_id, created = store.remember(MEMORIES["db"] + " (moved to port 6544 in November)", kind="decision",
                                     scope="global", importance="high")
    assert created
    old = episodes_sql.get_episode(store.conn, ids["db"])
    versions = [new_id] + ([ids["db"]] if old.superseded_by == new_id else [])
    folder = settings.recollections_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{SID}.json").write_text(json.dumps({"messageUuid": "u", "timestamp": 1, "bites": [
        {"id": new_id, "bite": "x", "date": "2026-11-01", "importance": "high"},
        {"id": ids["brand"], "bite": "y", "date": "2026-11-01", "importance": "high"}]}))
    event = {"session_id": OTHER, "cwd": PROJECT, "hook_event_name": "SessionStart", "source": "startup"}
    assert new_id in hook_output(event, str(settings.home))

    erased = forget.forget(store, settings, new_id, reason="wrong: password hunter2 token sk-ant-api03-" + "y" * 40)
    assert [e.id for e in erased] == versions
    for episode_id in versions:
        episode = episodes_sql.get_episode(store.conn, episode_id)
        assert episode.status == "forgotten" and episode.full_content == "" and episode.summary == "[forgotten]"
    reason = store.conn.execute("SELECT forgotten_reason FROM episodes WHERE id = ?", (new_id,)).fetchone()[0]
    assert reason.startswith("wrong") and "sk-ant-api03-" + "y" * 40 not in reason  # redacted
    assert [b["id"] for b in json.loads((folder / f"{SID}.json").read_text())["bites"]] == [ids["brand"]]
    assert new_id not in hook_output(event, str(settings.home))
    assert all(s.episode.id != new_id for s in store.search("staging database pgbouncer port", limit=10))
    # Forgetting again is harmless; an unknown id says where ids come from.
    assert forget.forget(store, settings, new_id)[0].status == "forgotten"
    with pytest.raises(LookupError, match="engram recall"):
        forget.forget(store, settings, "ep_nope")


def test_the_writer_never_writes_back_a_memory_forgotten_during_its_search(
        store: EpisodeStore, settings: Settings, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    writer = RecollectionWriter(SettingsHolder(settings))
    original = recollections.offers
    found_then: list[str] = []

    def search_then_forget(*args, **kwargs):
        found = original(*args, **kwargs)
        found_then.extend(o.episode.id for o in found)
        forget.forget(store, settings, ids["db"])  # memory_forget from another process, mid-search
        return found

    monkeypatch.setattr(recollections, "offers", search_then_forget)
    path = writer.write(store, SID, "u1", "How do I connect to the staging database pgbouncer?", project=None)
    assert ids["db"] in found_then  # the search found it…
    assert ids["db"] not in [b["id"] for b in json.loads(path.read_text())["bites"]]  # …and it was not written


def test_engram_forget_bulk_shows_first_and_asks(settings: Settings, store: EpisodeStore, ids: dict[str, str],
                                                 engram_home: Path) -> None:
    env = {"ENGRAM_HOME": str(engram_home)}
    dry = run_engram("forget", "--query", "deploy release", "--dry-run", env=env)
    assert "would forget: 1 memories" in dry.stdout and ids["deploy"] in dry.stdout
    assert episodes_sql.get_episode(store.conn, ids["deploy"]).status == "active"
    refused = run_engram("forget", "--query", "deploy release", env=env, check=False)
    assert refused.returncode == 1 and ids["deploy"] in refused.stdout and "--yes" in refused.stderr
    assert episodes_sql.get_episode(store.conn, ids["deploy"]).status == "active"
    done = run_engram("forget", "--query", "deploy release", "--yes", "--reason", "obsolete", env=env)
    assert ids["deploy"] in done.stdout and "forgot 1 memories" in done.stdout
    assert episodes_sql.get_episode(store.conn, ids["deploy"]).status == "forgotten"
    # --before: every memory made before a day; nothing yet before 2000.
    assert "nothing to forget" in run_engram("forget", "--before", "2000-01-01", "--yes", env=env).stdout
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
    listed = run_engram("forget", "--before", tomorrow, "--dry-run", env=env).stdout
    assert ids["db"] in listed and ids["brand"] in listed and ids["deploy"] not in listed
    bad = run_engram("forget", "--before", "last tuesday", env=env, check=False)
    assert bad.returncode == 1 and "YYYY-MM-DD" in bad.stderr
    nothing = run_engram("forget", env=env, check=False)
    assert nothing.returncode == 1 and "--query" in nothing.stderr


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_memory_forget_from_the_mcp_tool(settings: Settings, ids: dict[str, str]) -> None:
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        forgotten = await client.call_tool("memory_forget", {"id": ids["brand"], "reason": "the user said so"})
        recalled = await client.call_tool("memory_recall", {"query": "marketing site brand colour", "project": "*"})
        expanded = await client.call_tool("memory_expand", {"id": ids["brand"]})
        unknown = await client.call_tool("memory_forget", {"id": "ep_ffff"})
    assert not forgotten.is_error
    assert forgotten.structured_content["forgotten"] == [ids["brand"]]
    assert "Tailwind" in forgotten.content[0].text and "not be recalled or injected again" in forgotten.content[0].text
    assert ids["brand"] not in json.dumps(recalled.structured_content)
    assert expanded.is_error and "forgotten" in expanded.content[0].text
    assert unknown.is_error and "no memory with id" in unknown.content[0].text


def test_rounds_embedded_while_the_session_went_off_the_record_are_not_stored(
        store: EpisodeStore, tmp_path: Path) -> None:
    path = transcript(tmp_path, SID, user_line("a question worth keeping", session_id=SID),
                      assistant_line("an answer worth keeping", session_id=SID, message_id="m1"))
    Tailer(store.conn).tail(path)
    # The memory thread read these rounds, then the capture thread recorded the opt-out (messages and all
    # are dropped in that transaction; here only the mark is set, to show the write itself refuses).
    sessions_sql.set_opt_out(store.conn, SID, "record")
    assert Episodizer(store).episodize_slice(SID, final=True) == (0, False)
    assert episodes_sql.newest_session_episode_ids(store.conn, SID, 10) == frozenset()
