"""The LLM gate under pressure: one call at a time across processes, and a budget no prompt can overshoot."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from processor.jobs import costs
from processor.jobs.backends.base import LLMRequest
from processor.jobs.backends.openai_backend import OpenAIBackend
from processor.jobs.llm_gate import LLMGate
from processor.store import open_store
from tests.conftest import REPO
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.jobs_fixtures import add_messages, conversation, make_settings, now_ms, query

PRICES = {"gpt-4.1-nano": [1.00, 4.00]}  # USD per million tokens: round numbers for the arithmetic below


@pytest.fixture
def server() -> FakeOpenAI:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def test_three_extract_processes_never_call_the_llm_at_the_same_time(engram_home: Path, server: FakeOpenAI) -> None:
    server.default = {"mode": "timeout", "seconds": 0.4}  # each call takes a while: overlaps would show
    values = {"extractor": "openai", "openai_base_url": server.base_url, "openai_model": "gpt-4.1-nano",
              "openai_api_key_env": "ENGRAM_TEST_OPENAI_KEY", "llm_timeout_seconds": 10.0,
              "max_prompt_tokens": 400, "max_message_chars": 200, "daily_budget_usd": 100.0}
    settings = make_settings(**values)
    for n in range(6):
        add_messages(settings, f"s{n}", conversation(4, topic=f"topic {n}"), activity_ms=now_ms() - 600_000)
    env = {**os.environ, "ENGRAM_TEST_OPENAI_KEY": "sk-test",
           **{f"ENGRAM_{k.upper()}": str(v) for k, v in values.items()}}
    procs = [subprocess.Popen([sys.executable, "-m", "processor.cli", "extract"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert len(server.calls) >= 6  # every session extracted, by whichever process claimed it
    assert server.max_in_flight == 1
    assert query(settings, "SELECT count(DISTINCT job_id) FROM llm_calls")[0][0] == 6


@pytest.mark.parametrize("text", [
    "北京的数据库迁移计划需要在周五之前完成，并且所有测试必须通过。" * 1500,   # CJK: ~1 token a character
    "🚀🔥✅🎉 deploy went fine 🙌🏽👍🏿 " * 1500,                              # emoji: several tokens each
])
def test_a_prompt_that_could_cross_the_cap_does_not_start(engram_home: Path, server: FakeOpenAI,
                                                          text: str) -> None:
    settings = make_settings(extractor="openai", openai_base_url=server.base_url, openai_model="gpt-4.1-nano",
                             openai_api_key_env="ENGRAM_TEST_OPENAI_KEY", model_prices=PRICES)
    request = LLMRequest(system="Extract memories.", prompt=text, schema={"type": "object"}, schema_name="x",
                         max_output_tokens=100, timeout=5.0)
    # A budget the old characters/4 guess would have let this call into, but its true worst case exceeds.
    guess = costs.Price(1.0, 4.0, True).cost(costs.estimate_tokens(request.system + text), 100)
    worst = costs.Price(1.0, 4.0, True).cost(costs.worst_case_input_tokens(request.system + text), 100)
    assert guess < worst
    settings = make_settings(extractor="openai", openai_base_url=server.base_url, openai_model="gpt-4.1-nano",
                             openai_api_key_env="ENGRAM_TEST_OPENAI_KEY", model_prices=PRICES,
                             daily_budget_usd=(guess + worst) / 2)
    conn = open_store(settings.db_path)
    gate = LLMGate(settings, threading.Event())
    backend = OpenAIBackend(settings, api_key="sk-test")
    try:
        with pytest.raises(costs.BudgetExhausted):
            gate.call(conn, backend, None, request, str)
        assert server.calls == []  # refused before anything was sent
        ascii_request = LLMRequest(system="Extract memories.", prompt="x" * (len(text) // 3), schema={},
                                   schema_name="x", max_output_tokens=100, timeout=5.0)
        gate.call(conn, backend, None, ascii_request, str)  # the same budget admits a prompt that fits
        assert len(server.calls) == 1
    finally:
        backend.close()
        conn.close()


def test_worst_case_tokens_bound_any_byte_level_tokenizer() -> None:
    for text in ("plain English words", "北京", "🚀🏽", "naïve café", ""):
        assert costs.worst_case_input_tokens(text) == len(text.encode("utf-8"))
