"""Capturing the real fixture transcripts (Claude Code 1.0.24 – 2.1.114) end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apsw
import pytest

from tests.conftest import FIXTURE_PROJECTS, run_engram

_PLUMBING = re.compile(r"<command-(name|message|args)>|<local-command-(stdout|stderr|caveat)>|^Caveat: The messages")
_SPANS = re.compile(r"<system-reminder>.*?</system-reminder>|<private>.*?</private>", re.S)


def independent_counts(root: Path) -> dict[str, int]:
    """Messages per session, counted straight from the JSON without Engram's parser.

    User lines count when they have text of their own; assistant lines count once
    per message.id. A uuid already seen (sessions resumed from another) counts once.
    """
    counts: dict[str, int] = {}
    seen_uuids: set[str] = set()
    for path in sorted(root.glob("*/*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p))):
        if path.name.startswith("agent-") or path.stat().st_size == 0:
            continue
        keys: set[str] = set()
        for raw in path.read_bytes().splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
                continue
            if entry.get("isMeta") or entry.get("isCompactSummary") or entry.get("isSidechain"):
                continue
            content = entry["message"]["content"]
            if isinstance(content, str):
                pieces = [content]
            else:
                pieces = [b.get("text", "") for b in content if b.get("type") == "text"]
                if any(b.get("type") == "tool_use" for b in content):
                    pieces.append("tool")
            text = _SPANS.sub("", "\n".join(pieces)).strip()
            if not text or (entry["type"] == "user" and _PLUMBING.search(text[:200])):
                continue
            if entry["uuid"] in seen_uuids:
                continue
            seen_uuids.add(entry["uuid"])
            keys.add(entry["message"].get("id") or entry["uuid"] if entry["type"] == "assistant" else entry["uuid"])
        if keys:
            counts[path.stem] = len(keys)
    return counts


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    home = tmp_path_factory.mktemp("home")
    env = {"ENGRAM_HOME": str(home)}
    run_engram("backfill", "--projects-dir", str(FIXTURE_PROJECTS), env=env, timeout=600)  # embeds ~600 episodes
    status = json.loads(run_engram("status", "--json", "--projects-dir", str(FIXTURE_PROJECTS), env=env).stdout)
    return home, status


def test_every_fixture_file_parses_without_unhandled_errors(captured: tuple[Path, dict]) -> None:
    home, status = captured
    log_text = (home / "logs" / "engram.log").read_text()
    assert "Traceback" not in log_text
    assert status["sessions"] > 0 and status["messages"] > 0


def test_message_counts_per_session_match_an_independent_count(captured: tuple[Path, dict]) -> None:
    home, _ = captured
    conn = apsw.Connection(str(home / "engram.db"))
    stored = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id").fetchall())
    assert stored == independent_counts(FIXTURE_PROJECTS)


def test_status_json_reports_integer_counts(captured: tuple[Path, dict]) -> None:
    home, status = captured
    conn = apsw.Connection(str(home / "engram.db"))
    assert status["messages"] == conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert status["sessions"] == conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert isinstance(status["sessions"], int) and isinstance(status["messages"], int)
    assert status["active_sessions"] and "capture_lag_bytes" in status["active_sessions"][0]


def test_subagent_meta_and_injected_lines_are_absent(captured: tuple[Path, dict]) -> None:
    home, _ = captured
    conn = apsw.Connection(str(home / "engram.db"))
    sessions = {row[0] for row in conn.execute("SELECT transcript_path FROM sessions")}
    assert not any("/subagents/" in p or Path(p).name.startswith("agent-") for p in sessions)
    subagent_uuids = set()
    meta_uuids = set()
    for path in FIXTURE_PROJECTS.rglob("*.jsonl"):
        for raw in path.read_bytes().splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "uuid" not in entry:
                continue
            if path.name.startswith("agent-") or "subagents" in path.parts:
                subagent_uuids.add(entry["uuid"])
            if entry.get("isMeta") or entry.get("isCompactSummary"):
                meta_uuids.add(entry["uuid"])
    stored = {row[0] for row in conn.execute("SELECT line_uuid FROM message_lines UNION SELECT uuid FROM messages")}
    assert not stored & meta_uuids
    # A subagent file can repeat main-session lines; only lines unique to subagents must be absent.
    main_uuids = set()
    for path in FIXTURE_PROJECTS.glob("*/*.jsonl"):
        if not path.name.startswith("agent-"):
            main_uuids |= {json.loads(r).get("uuid") for r in path.read_bytes().splitlines() if r.startswith(b"{")}
    assert not stored & (subagent_uuids - main_uuids)
    for (text,) in conn.execute("SELECT text FROM messages"):
        assert "<system-reminder>" not in text
        assert "<command-name>" not in text
        assert "<engram-recollection>" not in text
