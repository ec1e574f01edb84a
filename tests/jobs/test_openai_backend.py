"""The openai backend against a real loopback HTTP server, through every fault in the issue's list.

In every case: no captured message lost, no duplicate episode, the queue drains after recovery.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from processor.config import SettingsHolder
from processor.jobs import JobRunner
from processor.jobs.backends.openai_backend import OpenAIBackend
from tests.support.fake_openai_server import FakeOpenAI, closed_port
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query

SECRET = "sk-test-DO-NOT-LOG-0123456789"


@pytest.fixture
def server():
    fake = FakeOpenAI(models={"gpt-4.1-nano"}).start()
    yield fake
    fake.stop()


def _settings(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, **overrides):
    monkeypatch.setenv("ENGRAM_TEST_OPENAI_KEY", SECRET)
    values = {"extractor": "openai", "openai_base_url": server.base_url, "openai_model": "gpt-4.1-nano",
              "openai_api_key_env": "ENGRAM_TEST_OPENAI_KEY", "llm_timeout_seconds": 1.0,
              "max_prompt_tokens": 700, "max_message_chars": 300, "breaker_failures": 10}
    values.update(overrides)
    return make_settings(**values)


def _seed(settings) -> list[int]:
    # Long enough for two batches with max_prompt_tokens = 700.
    return add_messages(settings, "s1", [(r, t + " " + "v" * 250) for r, t in conversation(6)],
                        activity_ms=now_ms() - 600_000)


def _assert_recovered(settings, ids: list[int], server: FakeOpenAI) -> None:
    assert query(settings, "SELECT count(*) FROM jobs WHERE state != 'done'")[0][0] == 0
    assert query(settings, "SELECT extracted_through FROM extraction_state") == [(ids[-1],)]
    assert query(settings, "SELECT count(*) FROM messages")[0][0] == len(ids)  # nothing lost
    summaries = [r[0] for r in query(settings, "SELECT summary FROM episodes WHERE source_type = 'auto'")]
    assert len(summaries) == len(set(summaries)) >= 2  # one memory per batch, none twice
    ok_prompts = [c["messages"][-1]["content"] for c in server.calls]
    for i in range(6):  # every message reached the model
        assert any(f"Question {i} about" in p for p in ok_prompts)


FAULTS = [
    pytest.param([{"mode": "500"}, {"mode": "503"}], "answered HTTP 50", id="5xx"),
    pytest.param([{"mode": "invalid_json"}], "not JSON", id="invalid-json"),
    pytest.param([{"mode": "schema_violation"}], "schema violation", id="schema-violation"),
    pytest.param([{"mode": "empty"}], "empty answer", id="empty-output"),
    pytest.param([{"mode": "enormous"}], "runaway", id="enormous-output"),
    pytest.param([{"mode": "bad_body"}], "openai", id="not-the-api"),
    pytest.param([{"mode": "timeout", "seconds": 2.5}], "did not answer within 1 s", id="timeout"),
]


@pytest.mark.parametrize(("script", "error_words"), FAULTS)
def test_fault_then_recovery(engram_home: Path, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch,
                             caplog: pytest.LogCaptureFixture, script: list[dict], error_words: str) -> None:
    caplog.set_level(logging.DEBUG)
    settings = _settings(server, monkeypatch)
    ids = _seed(settings)
    server.script.extend(script)
    runner = JobRunner(settings)
    drain(runner)
    runner.close()
    _assert_recovered(settings, ids, server)
    errors = [r[0] for r in query(settings, "SELECT error FROM llm_calls WHERE ok = 0")]
    assert len(errors) == len(script) and all(error_words.lower() in e.lower() for e in errors), errors
    assert query(settings, "SELECT max(attempts) FROM jobs")[0][0] == len(script)
    # The key went to the server and nowhere else.
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    stored = str(query(settings, "SELECT * FROM llm_calls")) + str(query(settings, "SELECT * FROM jobs"))
    assert SECRET not in caplog.text and SECRET not in stored


def test_rate_limit_honours_retry_after(engram_home: Path, server: FakeOpenAI,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(server, monkeypatch, retry_base_seconds=0.01)
    ids = _seed(settings)
    server.script.append({"mode": "429", "retry_after": "1"})
    runner = JobRunner(settings)
    runner.open()
    runner.wake()
    started = time.monotonic()
    runner.run_until_idle()
    job = query(settings, "SELECT state, next_attempt_at - updated_at, last_error FROM jobs")[0]
    assert job[0] == "pending" and job[1] >= 990 and "429" in job[2]
    assert runner.gate.paused_until >= now_ms() + 800  # every LLM job waits, not just this one
    drain(runner)
    runner.close()
    assert time.monotonic() - started >= 1.0
    _assert_recovered(settings, ids, server)


def test_connection_refused_then_server_comes_up(engram_home: Path, server: FakeOpenAI,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    settings = _settings(server, monkeypatch, openai_base_url=dead)
    ids = _seed(settings)
    holder = SettingsHolder(settings)
    runner = JobRunner(holder)
    runner.open()
    runner.wake()
    runner.run_until_idle()
    assert "cannot reach" in query(settings, "SELECT last_error FROM jobs")[0][0]
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 0
    holder.replace(_settings(server, monkeypatch))  # e.g. the user started the server and sent SIGHUP
    runner.settings_changed()
    drain(runner)
    runner.close()
    _assert_recovered(settings, ids, server)


def test_unknown_model_is_a_clear_error_retried_not_dropped(engram_home: Path, server: FakeOpenAI,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(server, monkeypatch, openai_model="gpt-does-not-exist", breaker_failures=2)
    ids = _seed(settings)
    holder = SettingsHolder(settings)
    runner = JobRunner(holder)
    runner.open()
    for _ in range(3):
        runner.wake()
        runner.run_until_idle()
        time.sleep(0.1)
    error = query(settings, "SELECT last_error FROM jobs")[0][0]
    assert "no model 'gpt-does-not-exist'" in error and "set openai_model" in error
    assert runner.gate.breaker.is_open(now_ms()) and len(server.calls) == 2  # the breaker stopped the hammering
    assert query(settings, "SELECT state FROM jobs") == [("pending",)]
    runner.gate.breaker.open_until_ms = 0  # as after the cool-down
    holder.replace(_settings(server, monkeypatch))
    runner.settings_changed()
    drain(runner)
    runner.close()
    _assert_recovered(settings, ids, server)


def test_missing_key_for_openai_is_a_clear_error(engram_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_TEST_OPENAI_KEY", raising=False)
    settings = make_settings(extractor="openai", openai_api_key_env="ENGRAM_TEST_OPENAI_KEY")
    runner = JobRunner(settings)
    runner.open()
    runner.close()
    assert runner.backend is None and "$ENGRAM_TEST_OPENAI_KEY" in (runner.problem or "")
    with pytest.raises(Exception, match="needs an API key"):
        OpenAIBackend(settings)
