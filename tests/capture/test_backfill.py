"""A backfill meeting what could stall, lose or double it (issue 26): ten thousand short sessions, the processor
killed in the middle of a batch embedding, a 1 MB tool output of base64. The real capture, episode builder and
model on real SQLite files; the kill is a real SIGKILL of a real `engram backfill`."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from bench.testbed.transcripts import Conversation
from processor.config import Settings
from processor.memory.embedder import load_embedder
from processor.service.run_loop import Processor
from tests.conftest import REPO
from tests.conftest import query_live_db as query
from tests.support.jobs_fixtures import make_settings

PROJECT_DIR = "-src-shop"


def write_sessions(projects: Path, count: int, *, rounds: int = 1, folder: str = PROJECT_DIR) -> list[Path]:
    """`count` sessions of `rounds` finished exchanges each, as Claude Code writes them."""
    (projects / folder).mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        session_id = f"{n:08x}-5e55-4000-8000-{n:012x}"
        talk = Conversation(session_id, cwd="/src/shop")
        for r in range(rounds):
            talk.user(f"Session {n} round {r}: why does checkout step {n % 97} time out on staging?")
            talk.say(f"The payment client waited {n % 13 + r} s for the bank; a retry budget of {n % 5 + 2} fixed "
                     f"it in round {r}.", end_turn=True)
        path = projects / folder / f"{session_id}.jsonl"
        path.write_text("".join(talk.lines), encoding="utf-8")
        paths.append(path)
    return paths


def messages_outside_episodes(db: Path) -> int:
    return query(db, "SELECT count(*) FROM messages m JOIN sessions s ON s.session_id = m.session_id "
                     "WHERE m.id > s.episodized_through")[0][0]


def settings_for(projects: Path) -> Settings:
    return make_settings(projects_dir=str(projects))


def test_ten_thousand_short_sessions_are_each_captured_and_remembered_once(engram_home: Path, tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    write_sessions(projects, 10_000)
    settings = settings_for(projects)
    report, built = Processor(settings).run_once(None)
    assert report.files == 10_000 and report.messages == 20_000 and report.problems == 0
    db = settings.db_path
    assert messages_outside_episodes(db) == 0
    # One round each, one memory each (and nothing else: no failures, commits or preferences in them).
    assert query(db, "SELECT count(*), count(DISTINCT session_id) FROM episodes WHERE source_type = 'verbatim'") == [
        (10_000, 10_000)]
    assert built == query(db, "SELECT count(*) FROM episodes")[0][0]
    # A second pass finds nothing new.
    report, built = Processor(settings).run_once(None)
    assert report.messages == 0 and built == 0


def test_a_backfill_killed_mid_embedding_resumes_without_loss_or_a_second_embedding(tmp_path: Path) -> None:
    """SIGKILL while a batch of episodes is being embedded (a slice's vectors made, its transaction not
    committed), then the backfill again: the memories are those of an uninterrupted backfill, each once."""
    projects = tmp_path / "projects"
    write_sessions(projects, 60, rounds=8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") or k == "ENGRAM_MODELS_DIR"}

    def backfill(home: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "processor.cli", "backfill", "--projects-dir", str(projects)],
                                cwd=REPO, env={**env, "ENGRAM_HOME": str(home)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    clean = tmp_path / "clean"
    assert backfill(clean).wait(timeout=600) == 0
    expected = query(clean / "engram.db", "SELECT id, content_hash FROM episodes ORDER BY id")
    assert len(expected) >= 480

    killed = tmp_path / "killed"
    proc = backfill(killed)
    db = killed / "engram.db"
    deadline = time.monotonic() + 300
    try:
        # Killed once some episodes are committed and more are on their way (the model is embedding them).
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists() and 0 < _episodes(db) < len(expected) // 2:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the backfill ended before it could be killed mid-way"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    interrupted_at = _episodes(db)
    assert 0 < interrupted_at < len(expected)
    assert backfill(killed).wait(timeout=600) == 0
    assert query(db, "SELECT id, content_hash FROM episodes ORDER BY id") == expected
    assert messages_outside_episodes(db) == 0
    # Every stored vector is the one the clean run stored (up to the float noise of packing texts together):
    # nothing was embedded into another episode's row.
    mine, theirs = _vectors(db), _vectors(clean / "engram.db")
    assert mine.keys() == theirs.keys()
    assert min(float(mine[i] @ theirs[i]) for i in mine) > 0.999


def _episodes(db: Path) -> int:
    try:
        return query(db, "SELECT count(*) FROM episodes")[0][0]
    except Exception:  # noqa: BLE001 - not created or not migrated yet
        return 0


def _vectors(db: Path) -> dict[str, np.ndarray]:
    return {row[0]: np.frombuffer(row[1], dtype=np.float32)
            for row in query(db, "SELECT id, embedding FROM episodes WHERE embedding IS NOT NULL")}


def test_a_one_megabyte_tool_output_of_base64_is_captured_within_bounds(engram_home: Path, tmp_path: Path) -> None:
    """A tool that printed 1 MB of base64 (and a failing one that did): captured, remembered and searchable, the
    stored text bounded, and no step held many copies of it."""
    projects = tmp_path / "projects"
    blob = base64.b64encode(hashlib.sha512(b"seed").digest() * (3 * 2**20 // 4 // 64)).decode()
    dump = "\n".join(blob[i:i + 76] for i in range(0, len(blob), 76))
    assert len(dump) > 2**20
    talk = Conversation("b64b64b6-4000-4000-8000-000000000001", cwd="/src/shop")
    talk.user("Dump the recording as base64 so we can check the WAV header")
    talk.tool("Bash", {"command": "base64 assets/recording.wav"}, dump)
    talk.tool("Bash", {"command": "base64 -d broken.b64 > out.wav"}, dump + "\nbase64: invalid input", error=True)
    talk.say("The header says RIFF/WAVE at 44.1 kHz; the decode failed on the truncated copy.", end_turn=True)
    (projects / PROJECT_DIR).mkdir(parents=True)
    (projects / PROJECT_DIR / f"{talk.session_id}.jsonl").write_text("".join(talk.lines), encoding="utf-8")
    settings = settings_for(projects)
    processor = Processor(settings)
    load_embedder(settings.embedding_model, settings.models_dir)  # loaded before: its own allocations are not counted
    tracemalloc.start()
    try:
        report, built = processor.run_once(None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    db = settings.db_path
    assert report.problems == 0 and built >= 1 and messages_outside_episodes(db) == 0
    # The output itself is not a message; the failure keeps its head and tail, not the megabyte.
    assert max(len(row[0]) for row in query(db, "SELECT text FROM messages")) < 10_000
    [(error,)] = query(db, "SELECT error FROM tool_calls WHERE failed = 1")
    assert "invalid input" in error and len(error) < 10_000
    assert max(len(row[0]) for row in query(db, "SELECT full_content FROM episodes")) < 20_000
    # Parsed, redacted, stored and built into memories with a few copies of a line at most (each is 1 MB of JSON).
    assert peak < 12 * 2**20, f"{peak / 2**20:.0f} MB traced for two 1 MB outputs"
    processor.memory.open()
    try:
        assert processor.memory.store is not None
        hits = processor.memory.store.recall("RIFF WAVE header of the recording")
    finally:
        processor.memory.close()
    assert hits and "RIFF" in hits[0].bite + str(query(db, "SELECT full_content FROM episodes"))


def test_a_backfill_captures_opencodes_database_and_pis_files_with_every_other_agent(engram_home: Path,
                                                                                    tmp_path: Path) -> None:
    from bench.testbed.opencode_db import OpencodeStore
    from bench.testbed.pi_sessions import PiSession

    with OpencodeStore(tmp_path / "opencode") as store:
        session = store.session("/src/shop")
        session.prompt("why does checkout time out on staging?")
        step = session.step()
        session.answer(step, "The payment client waited 9 s for the bank; a retry budget of 3 fixed it.")
        session.finish(step, "stop")
    pi = PiSession(tmp_path / "pi", cwd="/src/shop")
    pi.prompt("why does the cart lose its items?")
    pi.answer("The session cookie expired after 5 minutes; it now lasts a day.")
    pi.write()
    write_sessions(tmp_path / "projects", 1)
    settings = make_settings(projects_dir=str(tmp_path / "projects"), opencode_data=str(tmp_path / "opencode"),
                             pi_home=str(tmp_path / "pi"))
    report, built = Processor(settings).run_once(None)
    assert report.files == 3 and report.messages == 6 and report.problems == 0
    db = settings.db_path
    assert dict(query(db, "SELECT agent, count(*) FROM sessions GROUP BY agent")) == {"claude": 1, "opencode": 1,
                                                                                       "pi": 1}
    assert messages_outside_episodes(db) == 0  # each finished turn made its episode
    assert Processor(settings).run_once(None)[0].messages == 0  # a second pass finds nothing new
