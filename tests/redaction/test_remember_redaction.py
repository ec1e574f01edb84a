"""Does a secret handed to `engram remember` (or memory_remember) stay out of the queue file, the
database and its WAL? Both writers go through write_remember_file, which redacts the text."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from processor.cli import main
from processor.jobs import JobRunner
from tests.support.jobs_fixtures import drain, make_settings, query

# Assembled at run time, so that no file in the repository holds a credential-shaped string.
SECRET = "ghp_" + "".join(random.Random(13).choice(string.ascii_letters + string.digits) for _ in range(36))
PASSWORD = "hunter2." + "".join(random.Random(14).choice(string.ascii_lowercase) for _ in range(6))


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_secret_given_to_engram_remember_never_reaches_queue_or_store(
    engram_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f"Deploy with token {SECRET}; the staging db uses password={PASSWORD} (rotate monthly)."
    assert main(["remember", text, "--kind", "fact", "--scope", "global"]) == 0
    settings = make_settings()
    queued = list(settings.queue_dir.glob("*.remember.json"))
    assert len(queued) == 1
    body = queued[0].read_text(encoding="utf-8")
    assert SECRET not in body and PASSWORD not in body
    assert "[REDACTED:github-token]" in body and "[REDACTED:password-assignment]" in body

    runner = JobRunner(settings)
    drain(runner)
    runner.close()
    stored = query(settings, "SELECT full_content FROM episodes")
    assert len(stored) == 1
    assert "rotate monthly" in stored[0][0] and "[REDACTED:github-token]" in stored[0][0]
    # Nothing under ENGRAM_HOME (database, WAL, queue, recollection files, logs) holds either.
    assert _files_holding(engram_home, SECRET) == []
    assert _files_holding(engram_home, PASSWORD) == []
