"""Cost control: the ledger, today's spend, prices, and the hard daily budget (also mid-batch)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from processor.capture.remember_inbox import RememberRequest, write_remember_file
from processor.config import SettingsHolder
from processor.jobs import JobRunner, format_jobs_status, jobs_status
from processor.jobs.costs import next_utc_day_ms, price_for, utc_day_start_ms
from processor.store import open_store
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query

PRICES = {"gpt-4.1-nano": [0.10, 0.40], "gpt-4.1": [2.0, 8.0]}


def test_price_lookup(caplog: pytest.LogCaptureFixture) -> None:
    assert price_for("gpt-4.1-nano", PRICES).cost(1_000_000, 1_000_000) == pytest.approx(0.5)
    assert price_for("gpt-4.1-nano-2025-04-14", PRICES).input_per_m == 0.10  # dated snapshot: longest prefix
    assert price_for("gpt-4.1-2025-04-14", PRICES).input_per_m == 2.0
    unknown = price_for("llama3.2:3b", PRICES)
    assert unknown.cost(10**6, 10**6) == 0 and not unknown.known and "no price for model 'llama3.2:3b'" in caplog.text
    day = utc_day_start_ms(now_ms())
    assert day <= now_ms() < next_utc_day_ms(now_ms()) == day + 86_400_000


def test_budget_reached_mid_batch_pauses_llm_jobs_only(engram_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    server = FakeOpenAI(usage=(20_000, 1_000)).start()  # each call costs $0.0024 at gpt-4.1-nano prices
    try:
        monkeypatch.setenv("ENGRAM_TEST_OPENAI_KEY", "sk-test")
        values = {"extractor": "openai", "openai_base_url": server.base_url, "openai_model": "gpt-4.1-nano",
                  "openai_api_key_env": "ENGRAM_TEST_OPENAI_KEY", "model_prices": PRICES, "daily_budget_usd": 0.004,
                  "max_prompt_tokens": 700, "max_message_chars": 300}
        settings = make_settings(**values)
        ids = add_messages(settings, "s1", [(r, t + " " + "v" * 250) for r, t in conversation(6)],
                           activity_ms=now_ms() - 600_000)
        holder = SettingsHolder(settings)
        runner = JobRunner(holder)
        runner.open()
        runner.wake()
        runner.run_until_idle()
        # Batch 1 ran and committed; batch 2 would pass the budget, so it did not start.
        assert len(server.calls) == 1
        through = query(settings, "SELECT extracted_through FROM extraction_state")[0][0]
        assert ids[0] < through < ids[-1]
        assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'auto'")[0][0] == 1
        job = query(settings, "SELECT state, attempts, next_attempt_at, last_error FROM jobs")[0]
        assert job[:3] == ("pending", 0, next_utc_day_ms(now_ms())) and "daily LLM budget reached" in job[3]
        assert "capture and verbatim episodes continue" in caplog.text
        conn = open_store(settings.db_path)
        status = jobs_status(conn, settings)
        conn.close()
        assert status["spend_today_usd"] == pytest.approx(0.0024) and status["llm_calls_today"] == 1
        assert status["tokens_today"] == {"in": 20_000, "out": 1_000}
        assert status["llm_pause_reason"] and "budget" in status["llm_pause_reason"]
        assert any("LLM spend today: $0.0024 of $0.00" in line for line in format_jobs_status(status))

        # Paused: more messages and new sessions queue nothing that calls the LLM, remember still works.
        write_remember_file(settings.queue_dir, RememberRequest("Budget pauses never block remember."))
        runner.wake()
        runner.run_until_idle()
        assert len(server.calls) == 1
        assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'manual'")[0][0] == 1

        # A bigger budget (config reload) resumes from the committed marker: nothing twice, nothing skipped.
        holder.replace(make_settings(**{**values, "daily_budget_usd": 1.0}))
        runner.settings_changed()
        conn = runner.conn
        conn.execute("UPDATE jobs SET next_attempt_at = 0 WHERE state = 'pending'")  # tomorrow, as it were
        drain(runner)
        runner.close()
    finally:
        server.stop()
    assert query(settings, "SELECT extracted_through FROM extraction_state") == [(ids[-1],)]
    # The part of each prompt after the rolling summary: the messages of that batch.
    prompts = [c["messages"][-1]["content"].split("New messages:\n", 1)[1] for c in server.calls]
    for i in range(6):
        assert sum(f"Question {i} about" in p for p in prompts) == 1
    assert query(settings, "SELECT count(*), sum(cost_usd) FROM llm_calls") == [(len(server.calls),
                                                                                 pytest.approx(0.0024 * len(prompts)))]


def test_unpriced_local_models_are_not_budget_limited(engram_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog_level = logging.getLogger("processor.jobs.costs").level
    server = FakeOpenAI(models={"qwen2.5:0.5b"}).start()
    try:
        settings = make_settings(extractor="openai", openai_base_url=server.base_url, openai_model="qwen2.5:0.5b",
                                 openai_api_key_env="ENGRAM_NO_SUCH_KEY", daily_budget_usd=0.0)
        add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
        runner = JobRunner(settings)
        drain(runner)
        runner.close()
    finally:
        server.stop()
    assert logging.getLogger("processor.jobs.costs").level == caplog_level
    assert len(server.calls) == 1 and query(settings, "SELECT cost_usd FROM llm_calls") == [(0.0,)]
    assert server.headers[0]["authorization"] == "Bearer not-needed-for-a-local-server"
