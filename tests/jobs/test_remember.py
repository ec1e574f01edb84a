"""remember jobs: request files go through the queue and ADD/UPDATE/NOOP; the file goes only after commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processor.capture.remember_inbox import RememberRequest, write_remember_file
from processor.jobs import JobRunner
from processor.jobs.backends.mock_backend import MockBackend
from tests.support.jobs_fixtures import drain, make_settings, query


def test_remember_files_become_manual_episodes_once(engram_home: Path) -> None:
    settings = make_settings()
    write_remember_file(settings.queue_dir, RememberRequest("Prefer pathlib over os.path.", kind="preference",
                                                            project="demo"))
    write_remember_file(settings.queue_dir, RememberRequest("Prefer pathlib over os.path.", kind="preference",
                                                            project="demo"))
    runner = JobRunner(settings)  # verbatim: remember jobs need no LLM
    drain(runner)
    runner.close()
    assert query(settings, "SELECT source_type, kind, importance, scope, project FROM episodes") == \
        [("manual", "preference", "high", "project", "demo")]
    assert query(settings, "SELECT type, state, priority FROM jobs") == [("remember", "done", 0)] * 2
    assert not list(settings.queue_dir.glob("*.remember.json"))


def test_crash_between_commit_and_unlink_does_not_duplicate(engram_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    path = write_remember_file(settings.queue_dir, RememberRequest("Deploys happen on Tuesdays.", kind="fact"))
    runner = JobRunner(settings)
    runner.open()
    real_unlink = Path.unlink

    def crash(self: Path, missing_ok: bool = False) -> None:
        if self.name.endswith(".remember.json"):
            raise OSError("killed right after the commit")
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", crash)
    runner.wake()
    runner.run_until_idle()
    assert path.exists() and query(settings, "SELECT count(*) FROM episodes")[0][0] == 1
    assert query(settings, "SELECT state, attempts FROM jobs") == [("pending", 1)]
    monkeypatch.undo()
    drain(runner)
    runner.close()
    assert not path.exists()
    assert query(settings, "SELECT count(*), max(access_count) FROM episodes") == [(1, 1)]  # the rerun was a NOOP


def test_bad_request_file_is_quarantined_not_lost(engram_home: Path) -> None:
    settings = make_settings()
    settings.queue_dir.mkdir(parents=True, exist_ok=True)
    bad = settings.queue_dir / "123-abc.remember.json"
    bad.write_text(json.dumps({"text": ""}))
    runner = JobRunner(settings)
    drain(runner)
    runner.close()
    assert not bad.exists() and (settings.queue_dir / "rejected" / bad.name).exists()
    assert query(settings, "SELECT state FROM jobs") == [("done",)]


def test_remember_runs_while_llm_jobs_are_paused_by_the_budget(engram_home: Path) -> None:
    settings = make_settings(daily_budget_usd=0.0, openai_model="gpt-4.1-nano")
    backend = MockBackend(model="gpt-4.1-nano")
    backend.billed = True
    backend.model = "gpt-4.1-nano"
    from tests.support.jobs_fixtures import add_messages, conversation, now_ms
    add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
    write_remember_file(settings.queue_dir, RememberRequest("The budget never blocks remember.", kind="fact"))
    runner = JobRunner(settings, backend=backend)
    runner.open()
    runner.wake()
    runner.run_until_idle()
    runner.run_until_idle()
    runner.close()
    assert backend.requests == []
    assert query(settings, "SELECT source_type FROM episodes") == [("manual",)]
    assert query(settings, "SELECT type, state FROM jobs ORDER BY type") == [("extract", "pending"),
                                                                             ("remember", "done")]


def test_a_backfill_can_run_remember_jobs_only(engram_home: Path) -> None:
    from tests.support.jobs_fixtures import add_messages, conversation, now_ms
    settings = make_settings()
    add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
    write_remember_file(settings.queue_dir, RememberRequest("Backfills never call an LLM."))
    backend = MockBackend()
    runner = JobRunner(settings, backend=backend)
    assert runner.run_until_idle(only={"remember"}) == 1
    assert backend.requests == []
    assert query(settings, "SELECT type, state FROM jobs ORDER BY type") == [("extract", "pending"),
                                                                             ("remember", "done")]
