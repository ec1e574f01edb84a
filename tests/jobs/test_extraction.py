"""Micro-batching triggers, bounded prompts, answer validation, progress committed with results."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from processor.jobs import JobRunner, dry_run, run_once
from processor.jobs.backends import OutputError
from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.extraction import (
    TRUNCATION_MARKER,
    OutputLimits,
    build_prompt,
    evaluate_sessions,
    head_tail,
    output_schema,
    parse_extraction,
)
from processor.store import open_store
from processor.store.episodes import StoredMessage
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query

MINUTE = 60_000


def _due(settings) -> dict[str, str | None]:
    conn = open_store(settings.db_path)
    try:
        return {d.session_id: d.reason for d in evaluate_sessions(conn, settings, now_ms())}
    finally:
        conn.close()


def test_triggers_count_time_and_idle(engram_home: Path) -> None:
    settings = make_settings(extractor="openai", openai_base_url="http://127.0.0.1:9/v1", extract_min_messages=4,
                             extract_max_minutes=20, extract_idle_minutes=5)
    # Active right now, 3 complete rounds (6 messages) + a new question: count trigger.
    add_messages(settings, "busy", conversation(3) + [("user", "and now?")])
    # Active, one complete round only: not due.
    add_messages(settings, "quiet", conversation(1) + [("user", "next")])
    # Active, a single incomplete round of many messages: the assistant is mid-answer, not due.
    add_messages(settings, "working", [("user", "refactor it")] + [("assistant", f"step {i}") for i in range(9)])
    # Idle for 10 minutes, two messages: idle trigger takes them all.
    add_messages(settings, "idle", conversation(1), activity_ms=now_ms() - 10 * MINUTE)
    # First message 30 minutes ago, still active now: time trigger.
    add_messages(settings, "long", [("user", "start"), ("assistant", "ok"), ("user", "more")],
                 activity_ms=now_ms(), step_ms=15 * MINUTE)
    # Older than recent_days: never scanned.
    add_messages(settings, "ancient", conversation(10), activity_ms=now_ms() - 30 * 86_400_000)
    due = _due(settings)
    assert due["busy"] and "6 new messages" in due["busy"]
    assert due["quiet"] is None
    assert due["working"] is None
    assert due["idle"] and "idle" in due["idle"]
    assert due["long"] and "minutes since the last extraction" in due["long"]
    assert "ancient" not in due

    out = io.StringIO()
    planned = dry_run(settings, out)
    text = out.getvalue()
    assert {p.key for p in planned} == {"extract:busy", "extract:idle", "extract:long"}
    assert "would queue extract" in text and "not due: session quiet" in text
    assert query(settings, "SELECT count(*) FROM jobs")[0][0] == 0  # dry run wrote nothing


def test_verbatim_extractor_queues_no_extraction(engram_home: Path) -> None:
    settings = make_settings(extractor="verbatim")
    add_messages(settings, "s1", conversation(5), activity_ms=now_ms() - 10 * MINUTE)
    runner = JobRunner(settings)
    drain(runner)
    runner.close()
    assert runner.backend is None and query(settings, "SELECT count(*) FROM jobs")[0][0] == 0
    out = io.StringIO()
    assert dry_run(settings, out) == [] and "extractor is verbatim" in out.getvalue()


def test_head_tail_truncation_and_whole_prompt_bound(engram_home: Path) -> None:
    settings = make_settings(max_message_chars=500, max_prompt_tokens=1200)
    text = "HEAD " + "x" * 5000 + " TAIL"
    cut = head_tail(text, 500)
    assert len(cut) <= 500 and cut.startswith("HEAD ") and cut.endswith(" TAIL")
    omitted = int(cut.split("[… ")[1].split(" characters")[0])
    assert cut == text[:len(cut.split("\n[…")[0])] + TRUNCATION_MARKER.format(n=omitted) + text[len(text) - len(
        cut.split("omitted …]\n")[1]):]
    assert omitted + len(cut) - len(TRUNCATION_MARKER.format(n=omitted)) == len(text)
    messages = [StoredMessage(i, f"u{i}", "user" if i % 2 else "assistant", f"message {i} " + "y" * 3000, None)
                for i in range(1, 40)]
    from processor.jobs.extraction import SYSTEM_PROMPT
    batches = []
    rest = messages
    while rest:
        batch = build_prompt("demo", "earlier we chose WAL mode", rest, settings)
        assert len(SYSTEM_PROMPT) + len(batch.prompt) <= 1200 * 4
        assert "earlier we chose WAL mode" in batch.prompt and "characters omitted" in batch.prompt
        batches.append(batch)
        rest = rest[len(batch.messages):]
    assert len(batches) > 5 and sum(len(b.messages) for b in batches) == len(messages)  # nothing skipped
    # One message larger than the whole budget still goes, cut to fit.
    huge = [StoredMessage(1, "u", "user", "z" * 100_000, None)]
    settings2 = make_settings(max_message_chars=1_000_000, max_prompt_tokens=1000)
    assert len(SYSTEM_PROMPT) + len(build_prompt(None, "", huge, settings2).prompt) <= 1000 * 4


def test_answer_validation(engram_home: Path) -> None:
    limits = OutputLimits()
    good = {"memories": [{"summary": "Use WAL mode. " + "word " * 100, "full_content": "Because readers.",
                          "entities": ["sqlite"], "importance": "urgent", "kind": "decision", "scope": "project"}],
            "rolling_summary": "We set up the store."}
    parsed = parse_extraction(json.dumps(good), limits)
    assert parsed.memories[0]["importance"] == "normal"  # unknown enum value: default
    assert len(parsed.memories[0]["summary"]) <= 40 * 4 + 1  # a bite is at most ~40 tokens
    assert parse_extraction("```json\n" + json.dumps(good) + "\n```", limits).rolling_summary == "We set up the store."
    for bad, words in [("", "empty"), ("  ", "empty"), ('{"memories": [', "not JSON"), ("[1, 2]", "list"),
                       ('{"memories": "none", "rolling_summary": ""}', "schema violation"),
                       ('{"memories": [], "rolling_summary": 3}', "schema violation"),
                       ('{"memories": [{"summary": ""}], "rolling_summary": ""}', "summary"),
                       ('{"memories": [{"summary": "a", "full_content": "b", "entities": [1]}], "rolling_summary": ""}',
                        "entities"),
                       (json.dumps({"memories": [], "rolling_summary": "x" * 300_000}), "runaway")]:
        with pytest.raises(OutputError, match=words):
            parse_extraction(bad, limits)
    schema = output_schema(limits, bounded=True)
    assert schema["properties"]["memories"]["maxItems"] == limits.max_memories
    assert "maxLength" not in json.dumps(output_schema(limits, bounded=False))


def test_extraction_batches_a_backlog_and_carries_the_rolling_summary(engram_home: Path) -> None:
    settings = make_settings(max_prompt_tokens=900, max_message_chars=400)
    ids = add_messages(settings, "s1", [(r, t + " " + "w" * 300) for r, t in conversation(12)],
                       activity_ms=now_ms() - 10 * MINUTE)
    answers = [{"memories": [{"summary": f"Batch {i} decided setting {i}", "full_content": f"Setting {i} is on.",
                              "entities": [f"setting-{i}"], "importance": "normal", "kind": "decision",
                              "scope": "project"}], "rolling_summary": f"summary after batch {i}"} for i in range(20)]
    backend = MockBackend(answers)
    runner = JobRunner(settings, backend=backend)
    drain(runner)
    runner.close()
    n = len(backend.requests)
    assert n >= 3
    for i in range(1, n):  # each batch sees the summary the previous one wrote
        assert f"summary after batch {i - 1}" in backend.requests[i].prompt
    assert query(settings, "SELECT extracted_through, rolling_summary, extractions FROM extraction_state") == \
        [(ids[-1], f"summary after batch {n - 1}", n)]
    assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'auto'")[0][0] == n
    # Every message went into exactly one prompt.
    seen = [m for r in backend.requests for m in range(12) if f"Question {m} about" in r.prompt]
    assert sorted(seen) == list(range(12))


def test_crash_between_answer_and_commit_redoes_the_batch_once(engram_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 10 * MINUTE)
    backend = MockBackend()
    runner = JobRunner(settings, backend=backend)
    runner.open()
    from processor.store import jobs as sql

    def crash(*args, **kwargs) -> None:
        raise RuntimeError("power cut while committing")

    monkeypatch.setattr(sql, "set_extraction_progress", crash)
    runner.wake()
    runner.run_until_idle()
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 0  # the episodes rolled back with the marker
    assert query(settings, "SELECT count(*) FROM extraction_state")[0][0] == 0
    assert query(settings, "SELECT state, attempts FROM jobs") == [("pending", 1)]
    monkeypatch.undo()
    drain(runner)
    runner.close()
    assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'auto'")[0][0] == 1
    assert len(backend.requests) == 2  # crash = redo


def test_mock_run_once_uses_canned_outputs(engram_home: Path) -> None:
    settings = make_settings(extractor="verbatim")
    add_messages(settings, "s1", conversation(3, "mock mode"), activity_ms=now_ms() - 10 * MINUTE)
    out = io.StringIO()
    assert run_once(settings, mock=True, out=out) == 1
    summary = query(settings, "SELECT summary, source_type FROM episodes")
    assert summary == [("Mock memory: Question 0 about mock mode: should we change setting 0?", "auto")]
    assert "ran 1 job(s) with the mock extractor" in out.getvalue()


def test_a_raw_newline_inside_a_string_is_accepted() -> None:
    text = '{"memories": [{"summary": "two\nlines", "full_content": "x", "entities": [], "importance": "normal", ' \
           '"kind": "fact", "scope": "project"}], "rolling_summary": "r"}'
    assert parse_extraction(text, OutputLimits()).memories[0]["summary"] == "two lines"
