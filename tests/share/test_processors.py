"""Two real `engram run` processors syncing continuously through the shared database: a finished turn on
machine A is found by machine B's `engram recall`, and a forget on B erases it on A, with no command run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from bench.testbed.transcripts import assistant_line, user_line
from tests.conftest import REPO, query_live_db
from tests.support.share_fixtures import Machine, SharedSetup

SID = "5a5a5a5a-0000-4000-8000-00000000a001"


def start(machine: Machine) -> subprocess.Popen[str]:
    env = {**os.environ, **machine.env()}
    return subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def engram(machine: Machine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "processor.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **machine.env()}, timeout=180)


def wait_for(predicate, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_two_running_processors_share_a_finished_turn_and_a_forget(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a, b = shared.machine("a", alice), shared.machine("b", alice)
    processors = [start(a), start(b)]
    try:
        for machine in (a, b):  # both up and connected (their machine registered)
            wait_for(lambda m=machine: query_live_db(m.home / "engram.db", "SELECT machine_id FROM share_state "
                                                    "WHERE role IS NOT NULL"), 180, f"{machine.name} connected")
        transcript = a.projects / "-work-shop" / f"{SID}.jsonl"
        transcript.parent.mkdir(parents=True)
        finished = json.loads(assistant_line(
            "The flaky checkout test failed because the tax service mock returned rates in cents; "
            "tests/fixtures/tax.json now uses euros.", session_id=SID, cwd="/work/shop", message_id="msg_fin",
            timestamp="2026-11-20T10:00:05.000Z"))
        finished["message"]["stop_reason"] = "end_turn"
        with open(transcript, "a") as f:
            f.write(user_line("Why did the checkout test flake?", session_id=SID, cwd="/work/shop",
                              timestamp="2026-11-20T10:00:00.000Z"))
            f.write(json.dumps(finished) + "\n")
        made = time.monotonic()

        def found_on_b() -> str | None:
            out = engram(b, "recall", "why did the checkout test flake tax mock", "--project", "/work/shop",
                         "--json")
            hits = json.loads(out.stdout or "[]") if out.returncode == 0 else []
            return next((h["id"] for h in hits if "cents" in h["bite"] or "tax" in h["bite"]), None)

        wait_for(found_on_b, 120, "the finished turn recalled on B")
        seconds = time.monotonic() - made
        memory_id = found_on_b()
        assert memory_id and seconds < 120
        forgot = engram(b, "forget", memory_id, "--reason", "wrong diagnosis")
        assert forgot.returncode == 0, forgot.stderr
        wait_for(lambda: query_live_db(a.home / "engram.db", "SELECT status FROM episodes WHERE id = ?",
                                       memory_id) == [("forgotten",)], 120, "the forget erasing A's copy")
        assert shared.admin_sql(f"SELECT full_content FROM engram.memories WHERE id = '{memory_id}'") == [(None,)]
    finally:
        for proc in processors:
            proc.send_signal(signal.SIGTERM)
        outputs = [proc.communicate(timeout=30) for proc in processors]
    for proc, (_, err) in zip(processors, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
