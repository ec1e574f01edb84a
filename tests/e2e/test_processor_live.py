"""The real `engram run` process: live capture, clean shutdown, and SIGKILL at random moments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw

from bench.testbed.transcripts import user_line
from processor.service.control_client import ping
from tests.conftest import FIXTURE_PROJECTS, REPO, query_live_db, run_engram

SID = "bbbbbbbb-0000-0000-0000-000000000002"


def start_processor(home: Path, projects: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)}
    return subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout: float, interval: float = 0.02) -> float:
    """Seconds until predicate() held; raises if it never did."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def message_texts(db: Path) -> list[str]:
    return [row[0] for row in query_live_db(db, "SELECT text FROM messages ORDER BY id")]


def test_live_append_is_captured_within_a_second_and_sigterm_exits_cleanly(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    transcript = projects / "-tmp-app" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(user_line("already there", session_id=SID))
    proc = start_processor(home, projects)
    try:
        db = home / "engram.db"
        wait_for(lambda: message_texts(db) == ["already there"], timeout=30)
        latencies = []
        for i in range(3):
            with open(transcript, "a") as f:
                f.write(user_line(f"live message {i}", session_id=SID))
            latencies.append(wait_for(lambda i=i: len(message_texts(db)) == i + 2, timeout=5))
        assert max(latencies) < 1.0, latencies
        new_session = projects / "-tmp-other" / "cccccccc-0000-0000-0000-000000000003.jsonl"
        new_session.parent.mkdir()
        new_session.write_text(user_line("a brand new session", session_id=new_session.stem))
        wait_for(lambda: "a brand new session" in message_texts(db), timeout=1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "processor stopped" in err


def _fixture_lines(limit_files: int) -> list[tuple[str, bytes]]:
    """(relative path, line) pairs from real fixture sessions, interleaved across files."""
    files = sorted(p for p in FIXTURE_PROJECTS.glob("*/*.jsonl")
                   if not p.name.startswith("agent-") and p.stat().st_size > 0)[:limit_files]
    per_file = [[(str(p.relative_to(FIXTURE_PROJECTS)), line) for line in p.read_bytes().splitlines(True)]
                for p in files]
    rng = random.Random(7)
    out: list[tuple[str, bytes]] = []
    while any(per_file):
        queue = rng.choice([q for q in per_file if q])
        out.append(queue.pop(0))
    return out


def snapshot(db: Path) -> list[tuple]:
    conn = apsw.Connection(str(db))
    try:
        return conn.execute(
            "SELECT uuid, session_id, role, text, line_offset FROM messages ORDER BY uuid").fetchall()
    finally:
        conn.close()


def test_sigkill_at_random_moments_during_replay_ends_with_the_rows_of_a_clean_run(tmp_path: Path) -> None:
    lines = _fixture_lines(limit_files=8)
    replay_root = tmp_path / "replay"
    home = tmp_path / "home"
    rng = random.Random(2026)
    position = 0
    kills = 0
    while position < len(lines):
        proc = start_processor(home, replay_root)
        time.sleep(rng.uniform(0.0, 0.6))  # sometimes killed while still starting up
        chunk_end = min(position + rng.randint(40, 160), len(lines))
        while position < chunk_end:
            rel, line = lines[position]
            target = replay_root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            # Sometimes a line lands in two writes, as a partial line would.
            with open(target, "ab") as f:
                cut = rng.randrange(len(line)) if rng.random() < 0.2 else len(line)
                f.write(line[:cut])
                f.flush()
                f.write(line[cut:])
            position += 1
            if position % 10 == 0:
                time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))  # killed mid-capture, mid-commit or idle
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        kills += 1
    assert kills >= 3
    run_engram("run", "--once", env={"ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(replay_root)},
               timeout=600)

    clean_home = tmp_path / "clean"
    run_engram("backfill", "--projects-dir", str(replay_root), env={"ENGRAM_HOME": str(clean_home)}, timeout=600)
    killed_rows = snapshot(home / "engram.db")
    clean_rows = snapshot(clean_home / "engram.db")
    assert len(clean_rows) > 50
    assert killed_rows == clean_rows


def test_on_a_fresh_home_the_first_session_is_captured_when_its_folder_appears(tmp_path: Path) -> None:
    """No ~/.claude/projects at start (nor ~/.claude): the processor watches the nearest folder that exists
    and picks the first session up as soon as it is written, not at the next rescan (set to an hour here)."""
    home, claude = tmp_path / "home", tmp_path / "user-home" / ".claude"
    claude.parent.mkdir()
    projects = claude / "projects"
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects),
           "ENGRAM_RESCAN_SECONDS": "3600"}
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        db = home / "engram.db"
        wait_for(lambda: ping(home / "run") is not None, timeout=60)
        time.sleep(0.5)  # past start-up: what follows is the live path, not the first discovery
        transcript = projects / "-tmp-app" / f"{SID}.jsonl"
        claude.mkdir()  # Claude Code creates its folders one by one, then writes the first line
        time.sleep(0.2)
        transcript.parent.mkdir(parents=True)
        transcript.write_text(user_line("the very first message", session_id=SID))
        took = wait_for(lambda: message_texts(db) == ["the very first message"], timeout=10)
        assert took < 2.0, took
        with open(transcript, "a") as f:  # and the root is watched from then on
            f.write(user_line("the second message", session_id=SID))
        wait_for(lambda: len(message_texts(db)) == 2, timeout=2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "watching" in err and str(tmp_path / "user-home") in err
