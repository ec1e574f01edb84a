"""The real processor as a service: ping, clean SIGTERM, single instance, SIGKILL + restart, SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.testbed.transcripts import user_line
from processor.service.control_client import ping, request
from tests.conftest import REPO, run_engram
from tests.e2e.test_processor_live import message_texts, wait_for

SID = "dddddddd-0000-0000-0000-000000000004"


def start(home: Path, projects: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects), "ENGRAM_HTTP_PORT": "0"}
    return subprocess.Popen([sys.executable, "-m", "processor.cli", "run", *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=15)
    return proc.returncode, err


def test_ping_second_instance_and_clean_sigterm(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    projects.mkdir()
    proc = start(home, projects)
    try:
        run_dir = home / "run"
        wait_for(lambda: ping(run_dir, timeout=0.5) is not None, timeout=30, interval=0.1)
        answer = ping(run_dir, timeout=1)
        assert answer is not None and answer["status"] == "ok"
        assert {"processing", "queue_depth", "uptime_seconds"} <= answer.keys()
        assert (run_dir / "engram.pid").exists() and (run_dir / "engram.port").exists()
        assert (run_dir / "token").stat().st_mode & 0o777 == 0o600
        assert request(run_dir, "POST", "/wake", {}, timeout=2) == {"woken": True}
        status = request(run_dir, "GET", "/status", None, timeout=5)
        assert status["sessions"] == 0

        second = run_engram("run", env={"ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)},
                            check=False, timeout=30)
        assert second.returncode == 73
        assert "already running" in second.stderr
    finally:
        started = time.monotonic()
        code, err = stop(proc)
    assert code == 0, err
    assert time.monotonic() - started < 10
    assert not (home / "run" / "engram.pid").exists()
    assert not (home / "run" / "engram.port").exists()


def test_sigkill_then_restart_resumes_with_nothing_lost(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    transcript = projects / "-tmp-svc" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    db = home / "engram.db"
    proc = start(home, projects)
    try:
        with open(transcript, "a") as f:
            f.write(user_line("before the crash", session_id=SID))
        wait_for(lambda: message_texts(db) == ["before the crash"], timeout=30)
    finally:
        code, _ = stop(proc, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert (home / "run" / "engram.pid").exists()  # a stale pid file is left behind…
    with open(transcript, "a") as f:
        f.write(user_line("while it was down", session_id=SID))
    proc = start(home, projects)  # …and does not stop the restart
    try:
        with open(transcript, "a") as f:
            f.write(user_line("after the restart", session_id=SID))
        wait_for(lambda: len(message_texts(db)) == 3, timeout=30)
        assert message_texts(db) == ["before the crash", "while it was down", "after the restart"]
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_config_errors_name_the_line_and_sighup_keeps_the_old_config(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    projects.mkdir()
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("recent_days = 7\nrecent_days ==\n")
    bad = run_engram("run", env={"ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)},
                     check=False, timeout=30)
    assert bad.returncode == 78
    assert "config.toml" in bad.stderr and "line 2" in bad.stderr

    (home / "config.toml").write_text("recent_days = 7\n")
    proc = start(home, projects)
    try:
        wait_for(lambda: ping(home / "run", timeout=0.5) is not None, timeout=30, interval=0.1)
        (home / "config.toml").write_text("recent_days = \n")
        proc.send_signal(signal.SIGHUP)
        log = home / "logs" / "engram.log"
        wait_for(lambda: "configuration not reloaded" in log.read_text(), timeout=10)
        assert ping(home / "run", timeout=1) is not None  # still running on the old configuration
        (home / "config.toml").write_text("recent_days = 3\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration reloaded" in log.read_text(), timeout=10)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert json.loads(run_engram("status", "--json", env={"ENGRAM_HOME": str(home)}).stdout)["sessions"] == 0


def test_sighup_reaches_the_control_plane_recall_with_new_ranking_weights(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    projects.mkdir()
    env = {"ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)}
    for text in ("The staging database is PostgreSQL 16 on port 5433",
                 "Deploys go through the release branch, never from main"):
        run_engram("remember", text, "--kind", "fact", "--scope", "global", env=env)
    proc = start(home, projects)
    run_dir = home / "run"

    def hits() -> list[dict]:
        return request(run_dir, "POST", "/recall", {"query": "staging database port", "limit": 2}, timeout=10)["bites"]

    try:
        wait_for(lambda: ping(run_dir, timeout=0.5) is not None, timeout=60, interval=0.1)
        wait_for(lambda: len(hits()) == 2, timeout=60, interval=0.2)
        # The defaults mix relevance with recency and frequency: a score is not its relevance.
        assert all(abs(h["score"] - h["relevance"]) > 1e-3 for h in hits())
        (home / "config.toml").write_text("weight_relevance = 1.0\nweight_recency = 0.0\nweight_frequency = 0.0\n")
        proc.send_signal(signal.SIGHUP)
        # Ranking by relevance alone: every thread's store reads the reloaded settings, the HTTP reader's too.
        wait_for(lambda: all(abs(h["score"] - h["relevance"]) < 1e-3 for h in hits()), timeout=15, interval=0.2)
    finally:
        code, err = stop(proc)
    assert code == 0, err
