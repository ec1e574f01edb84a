"""The RecollectionWriter: per-session bite files for the PreToolUse hook, on a real database with the
real embedding model. Topic gate, same-session exclusions, project scope, atomic replacement under a
concurrent reader, and the idle cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.testbed.transcripts import user_line
from processor.capture.captured import CapturedLine
from processor.capture.tailer import Tailer
from processor.config import SettingsHolder, load_settings
from processor.files import write_atomic
from processor.memory.episode_store import EpisodeStore
from processor.recall.recollections import RecollectionWriter, recollection_path

SID = "a1b2c3d4-0000-4000-8000-000000000001"
OTHER_SID = "a1b2c3d4-0000-4000-8000-000000000002"

MEMORIES = {
    "db": "The staging database is PostgreSQL 16 behind pgbouncer on port 6543; connect with psql via the bastion",
    "deploy": "Deploys go out with `make release` from the main branch; never deploy on Fridays",
    "brand": "The marketing site uses Tailwind CSS and the brand colour is orange #ff5a1f",
    "cooking": "Sourdough bread needs a 12 hour cold retard in the fridge before baking",
}


def iso_now(offset_s: float = 0.0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + offset_s))


@pytest.fixture
def ids(store: EpisodeStore) -> dict[str, str]:
    return {key: store.remember(text, kind="fact", scope="global")[0] for key, text in MEMORIES.items()}


@pytest.fixture
def writer(holder: SettingsHolder) -> RecollectionWriter:
    return RecollectionWriter(holder)


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def bite_ids(path: Path) -> list[str]:
    return [b["id"] for b in read(path)["bites"]]


def test_the_file_has_the_hooks_shape_and_the_relevant_memory_first(
        store: EpisodeStore, writer: RecollectionWriter, ids: dict[str, str]) -> None:
    path = writer.write(store, SID, "u1", "How do I connect to the staging database?", project=None)
    assert path == recollection_path(store.settings.recollections_dir, SID)
    data = read(path)
    assert set(data) == {"messageUuid", "timestamp", "bites", "lessons", "root", "branch"}
    assert data["messageUuid"] == "u1"
    assert abs(data["timestamp"] - time.time() * 1000) < 60_000
    assert 1 <= len(data["bites"]) <= 3
    first = data["bites"][0]
    assert set(first) == {"id", "bite", "date", "importance", "kind"}
    assert first["id"] == ids["db"] and "PostgreSQL 16" in first["bite"]
    assert first["date"] == time.strftime("%Y-%m-%d", time.gmtime()) and first["importance"] == "normal"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "lessons"])  # no temp file left


def test_topic_gate_keeps_the_file_for_the_same_topic_and_replaces_it_for_a_new_one(
        store: EpisodeStore, writer: RecollectionWriter, ids: dict[str, str]) -> None:
    path = writer.write(store, SID, "u1", "How do I connect to the staging database?", project=None)
    before = path.read_bytes()
    old = time.time() - 600
    os.utime(path, (old, old))
    assert writer.write(store, SID, "u2", "how do I connect to the staging database please", project=None) is None
    assert path.read_bytes() == before  # same topic: the hook will not inject again
    assert path.stat().st_mtime > old + 300  # …but the session counts as active for the idle cleanup
    assert writer.write(store, SID, "u3", "What is the brand colour of the marketing site?", project=None) == path
    data = read(path)
    assert data["messageUuid"] == "u3" and data["bites"][0]["id"] == ids["brand"]
    # The gate compares with the previous message of the same session only.
    assert writer.write(store, OTHER_SID, "v1", "What is the brand colour of the marketing site?",
                        project=None) is not None


def test_the_gate_rewrites_a_file_that_is_gone(store: EpisodeStore, writer: RecollectionWriter,
                                                ids: dict[str, str]) -> None:
    path = writer.write(store, SID, "u1", "How do I connect to the staging database?", project=None)
    path.unlink()
    assert writer.write(store, SID, "u2", "how do I connect to the staging database please", project=None) == path


def test_memories_from_the_same_sessions_latest_turns_are_not_bites(
        store: EpisodeStore, writer: RecollectionWriter, ids: dict[str, str]) -> None:
    own, _ = store.remember("The staging database password rotates every Monday at 9am", kind="fact",
                            scope="global", session_id=SID)
    query = "staging database password rotation"
    assert own not in bite_ids(writer.write(store, SID, "u1", query, project=None))
    assert bite_ids(writer.write(store, OTHER_SID, "v1", query, project=None))[0] == own


def test_ids_shown_by_the_prompt_hook_are_not_repeated(store: EpisodeStore, writer: RecollectionWriter,
                                                       ids: dict[str, str]) -> None:
    folder = store.settings.recollections_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{SID}.prompt").write_text(json.dumps({"shown": [ids["db"]], "timestamp": 1}))
    assert ids["db"] not in bite_ids(writer.write(store, SID, "u1", "staging database connection", project=None))
    (folder / f"{OTHER_SID}.prompt").write_text("{corrupt")  # a broken marker excludes nothing
    assert ids["db"] in bite_ids(writer.write(store, OTHER_SID, "v1", "staging database connection", project=None))
    # A message's bites the PreToolUse hook told ("asked" in <session>.shown) are not offered again either.
    third = "c0ffee00-0000-4000-8000-000000000003"
    (folder / f"{third}.shown").write_text(json.dumps({"shown": [], "asked": [ids["db"]], "created": []}))
    assert ids["db"] not in bite_ids(writer.write(store, third, "w1", "staging database connection", project=None))


def test_bites_below_the_relevance_floor_are_left_out(store: EpisodeStore, writer: RecollectionWriter,
                                                       ids: dict[str, str]) -> None:
    writer.write(store, SID, "u1", "How do I connect to the staging database?", project=None)
    path = writer.write(store, SID, "u2", "qwzx vbnk plmo", project=None)
    # Replaced all the same: the previous message's bites are not for this one.
    assert read(path)["messageUuid"] == "u2" and read(path)["bites"] == []


# --- handle(): what the memory thread calls -----------------------------------------------------


def capture(store: EpisodeStore, transcript: Path, *lines: str) -> list[CapturedLine]:
    with open(transcript, "a") as f:
        f.writelines(lines)
    return Tailer(store.conn).tail(transcript).captured


def test_handle_uses_the_sessions_project_and_skips_other_projects(
        store: EpisodeStore, writer: RecollectionWriter, tmp_path: Path) -> None:
    repo = tmp_path / "shop-api"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    mine, _ = store.remember("In shop-api run the tests with `tox -e py311`", kind="fact", scope="project",
                             project=str(repo))
    theirs, _ = store.remember("In other-app run the tests with `npm test -- --watch`", kind="fact",
                               scope="project", project="/elsewhere/other-app")
    transcript = tmp_path / "projects" / "-shop-api" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    [line] = capture(store, transcript, user_line("how do I run the tests?", session_id=SID, cwd=str(repo / "src"),
                                                  timestamp=iso_now()))
    path = writer.handle(store, SID, line)
    assert path is not None and read(path)["messageUuid"] == line.uuid
    assert mine in bite_ids(path) and theirs not in bite_ids(path)


def test_handle_skips_old_and_superseded_messages(store: EpisodeStore, writer: RecollectionWriter,
                                                  ids: dict[str, str], tmp_path: Path) -> None:
    transcript = tmp_path / "projects" / "-app" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    path = recollection_path(store.settings.recollections_dir, SID)
    [old] = capture(store, transcript, user_line("staging database?", session_id=SID, timestamp=iso_now(-3 * 3600)))
    assert writer.handle(store, SID, old) is None and not path.exists()  # a backfilled past: nobody reads it
    first, second = capture(store, transcript,
                            user_line("How do I connect to the staging database?", session_id=SID,
                                      timestamp=iso_now()),
                            user_line("What is the brand colour?", session_id=SID, timestamp=iso_now()))
    assert writer.handle(store, SID, first) is None and not path.exists()  # a later message is waiting
    assert writer.handle(store, SID, second) == path and read(path)["messageUuid"] == second.uuid
    # Claude Code's own interrupt notice is no prompt: it neither gets bites nor supersedes one.
    third, interrupt = capture(store, transcript,
                               user_line("How do we deploy on Fridays?", session_id=SID, timestamp=iso_now()),
                               user_line([{"type": "text", "text": "[Request interrupted by user]"}],
                                         session_id=SID, timestamp=iso_now()))
    assert writer.handle(store, SID, interrupt) is None and read(path)["messageUuid"] == second.uuid
    assert writer.handle(store, SID, third) == path and read(path)["messageUuid"] == third.uuid


def test_handle_follows_reloaded_settings(store: EpisodeStore, writer: RecollectionWriter, ids: dict[str, str],
                                          holder: SettingsHolder, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_RECOLLECTION_BITES", "1")
    holder.replace(load_settings())
    transcript = tmp_path / "projects" / "-app" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    [line] = capture(store, transcript, user_line("staging database and deploys", session_id=SID,
                                                  timestamp=iso_now()))
    assert len(bite_ids(writer.handle(store, SID, line))) == 1


# --- atomic replacement ---------------------------------------------------------------------------

READER = r"""
import json, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
reads = bad = 0
seen = set()
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        bad += 1
        continue
    reads += 1
    try:
        doc = json.loads(data)
        assert set(doc) == {"messageUuid", "timestamp", "bites"} and len(doc["bites"]) == 3
        seen.add(doc["messageUuid"])
    except Exception:
        bad += 1
print(json.dumps({"reads": reads, "bad": bad, "seen": len(seen)}))
"""


def test_a_concurrent_reader_never_sees_a_partial_file(store: EpisodeStore, writer: RecollectionWriter,
                                                      ids: dict[str, str]) -> None:
    path = writer.write(store, SID, "u0", "staging database", project=None)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), "3"], stdout=subprocess.PIPE, text=True)
    big_bite = "x" * 20_000  # large enough that a non-atomic write would be observed half-done
    written = 0
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        written += 1
        write_atomic(path, json.dumps({"messageUuid": f"u{written}", "timestamp": written,
                                       "bites": [{"id": f"ep_{i}", "bite": big_bite, "date": "2026-11-22",
                                                  "importance": "normal"} for i in range(3)]}))
    out, _ = reader.communicate(timeout=30)
    result = json.loads(out)
    assert result["bad"] == 0, result
    assert result["reads"] > 100 and result["seen"] > 10, result
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "lessons"])


# --- idle cleanup -----------------------------------------------------------------------------------


def test_idle_sessions_lose_their_files_and_active_ones_keep_them(store: EpisodeStore,
                                                                  writer: RecollectionWriter) -> None:
    folder = store.settings.recollections_dir
    folder.mkdir(parents=True, exist_ok=True)
    two_hours_ago = time.time() - 2 * 3600

    def make(name: str, mtime: float | None = None) -> Path:
        p = folder / name
        p.write_text("{}")
        if mtime is not None:
            os.utime(p, (mtime, mtime))
        return p

    idle = [make(f"{SID}.json", two_hours_ago), make(f"{SID}.state", two_hours_ago),
            make(f"{SID}.prompt", two_hours_ago)]
    orphan_state = make("dead-session.state", two_hours_ago)  # its .json is long gone
    old_temp = make(f".{SID}.json.1234.tmp", two_hours_ago)
    active = [make(f"{OTHER_SID}.json", two_hours_ago), make(f"{OTHER_SID}.state")]  # injected just now
    fresh = make("fresh-session.json")
    lock = make(".pretooluse.lock", two_hours_ago)
    foreign = make("notes.txt", two_hours_ago)
    writer._remember_topic(SID, store.embedder.embed_query("x"))
    writer._remember_topic("gone", store.embedder.embed_query("x"))

    assert writer.remove_idle() == 2
    for p in [*idle, orphan_state, old_temp]:
        assert not p.exists(), p
    for p in [*active, fresh, lock, foreign]:
        assert p.exists(), p
    assert writer.sessions_in_memory == 0  # forgotten with their files: the next message is a new topic
    assert writer.remove_idle() == 0


def test_idle_cleanup_respects_the_setting_and_a_missing_folder(store: EpisodeStore,
                                                                writer: RecollectionWriter) -> None:
    assert writer.remove_idle() == 0  # the folder does not exist yet
    folder = store.settings.recollections_dir
    folder.mkdir(parents=True)
    p = folder / f"{SID}.json"
    p.write_text("{}")
    os.utime(p, (time.time() - 1800, time.time() - 1800))
    assert writer.remove_idle() == 0 and p.exists()  # 30 min < the default 1 h
    assert writer.remove_idle(now=time.time() + 3600) == 1 and not p.exists()
