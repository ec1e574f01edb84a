"""Every agent's sessions side by side: where each agent's transcripts are found, a file read by the agent whose
layout it has, and the status counted per agent."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from bench.testbed.agent_transcripts import Chat, Rollout
from processor.capture.codex import CodexFormat
from processor.capture.gemini import GeminiFormat
from processor.capture.tailer import Tailer
from processor.store import sessions
from tests.capture.conftest import codex_session


def test_agent_folders_are_discovered_only_where_their_sessions_live(tmp_path: Path, codex_home: Path,
                                                                    gemini_dir: Path) -> None:
    from processor.capture.discover import discover_all

    rollout = Rollout(codex_home)
    rollout.prompt("x")
    rollout.write()
    chat = Chat(gemini_dir)
    chat.prompt("y")
    chat.write()
    (codex_home / "sessions" / "notes.jsonl").write_text("{}\n")  # not a rollout
    (gemini_dir / "tmp" / "project" / "logs.json").write_text("[]")
    (gemini_dir / "tmp" / "project" / "chats" / "other.jsonl").write_text("{}\n")
    formats = [CodexFormat(codex_home / "sessions"), GeminiFormat(gemini_dir / "tmp"),
               CodexFormat(tmp_path / "no-codex" / "sessions")]
    found = discover_all(formats, None)
    assert sorted(found) == sorted([rollout.path, chat.path])
    assert all(f.accepts(p) for f, p in zip(formats, [rollout.path, chat.path], strict=False))
    assert not formats[0].accepts(codex_home / "sessions" / "notes.jsonl")
    assert os.path.isfile(chat.path)


def test_status_counts_sessions_per_agent_and_names_unknown_records() -> None:
    from processor.status import format_status

    text = format_status({"sessions": 3, "messages": 9, "episodes": 2, "db": "/x/engram.db", "db_exists": True,
                          "sessions_by_agent": {"claude": 1, "codex": 2},
                          "active_sessions": [{"session_id": "s1", "agent": "gemini", "messages": 4,
                                               "last_activity": None, "capture_lag_bytes": 0, "project": "/p"}],
                          "unknown_records": {"codex": {"holographic_state": 3}}})
    assert "sessions: 3 (Claude Code 1, Codex 2)" in text
    assert "s1  Gemini CLI" in text
    assert "Codex record types not known to this Engram (skipped): holographic_state ×3" in text


def test_a_file_under_no_captured_root_is_read_by_the_agent_whose_layout_it_has(
        conn: apsw.Connection, tmp_path: Path) -> None:
    """A tailer given no formats (a test's, a benchmark's) reads a rollout as Codex's, a chat as Gemini's, any
    other JSON Lines file as Claude Code's; a file of no agent's layout is refused, naming the path."""
    from bench.testbed.transcripts import user_line
    from processor.capture.tailer import NotATranscript

    tailer = Tailer(conn)
    rollout = codex_session(tmp_path / "copied-codex-home")
    assert tailer.tail(rollout.write()).agent == "codex"
    chat = Chat(tmp_path / "copied-gemini" / ".gemini")
    chat.prompt("Which port does the dev server use?")
    assert tailer.tail(chat.write()).agent == "gemini"
    claude = tmp_path / "copied" / "-tmp-app" / "agent-1234.jsonl"  # a subagent's transcript is Claude Code's too
    claude.parent.mkdir(parents=True)
    claude.write_text(user_line("Run the linter", session_id="agent-1234"))
    assert tailer.tail(claude).agent == "claude"
    assert sessions.counts_by_agent(conn) == {"claude": 1, "codex": 1, "gemini": 1}
    notes = tmp_path / "notes.txt"
    notes.write_text("not a transcript\n")
    with pytest.raises(NotATranscript, match=str(notes)):
        tailer.tail(notes)


def test_backfill_and_status_cover_the_copilot_cli_and_qwen_code(tmp_path: Path) -> None:
    """`engram backfill` reads every agent's folder the settings name; `engram status` counts each one's sessions,
    and the viewer and recall name the agent by the same names."""
    import json

    from bench.testbed.copilot_sessions import CopilotSession
    from bench.testbed.qwen_chats import QwenChat
    from processor.config import AGENT_NAMES
    from tests.conftest import run_engram

    copilot = CopilotSession(tmp_path / "copilot-home", cwd="/tmp/shop-api")
    copilot.prompt("Why does the Copilot build fail?")
    copilot.answer("The bundle is stale.")
    copilot.write()
    qwen = QwenChat(tmp_path / "qwen-home", cwd="/tmp/shop-api")
    qwen.prompt("Why does the Qwen build fail?")
    qwen.answer("The lockfile is stale.")
    qwen.write()
    env = {"ENGRAM_HOME": str(tmp_path / "engram-home"), "ENGRAM_PROJECTS_DIR": str(tmp_path / "projects"),
           "COPILOT_HOME": str(tmp_path / "copilot-home"), "QWEN_HOME": str(tmp_path / "qwen-home")}
    run_engram("backfill", env=env)
    status = json.loads(run_engram("status", "--json", env=env).stdout)
    assert status["sessions_by_agent"] == {"copilot": 1, "qwen": 1}
    assert (AGENT_NAMES["copilot"], AGENT_NAMES["qwen"]) == ("Copilot CLI", "Qwen Code")


# cipher-box's real output: jest run through `pnpm --filter api test -- --testPathPattern=…` found no test and
# exited 0 (--passWithNoTests); the session went on looking for the call that runs the spec.
JEST_RAN_NONE = ("> @cipherbox/api@0.8.0 test /Users/michael/Code/cipher-box/apps/api\n"
                 "> jest --passWithNoTests -- --testPathPattern=auth.service.spec --no-coverage\n\n"
                 "No tests found, exiting with code 0\nIn /Users/michael/Code/cipher-box/apps/api\n"
                 "  45 files checked.\n"
                 "  testMatch:  - 0 matches\nPattern: --testPathPattern=auth.service.spec - 0 matches\n")
RAN_NONE_COMMAND = "pnpm --filter api test -- --testPathPattern='auth.service.spec' --no-coverage 2>&1 | tail -60"


def test_a_test_run_that_ran_nothing_is_a_failure_whichever_agent_ran_it(
        conn: apsw.Connection, tailer: Tailer, tmp_path: Path, codex_home: Path, gemini_dir: Path) -> None:
    """Its exit code says it passed; its output says it ran nothing, which is how it failed: captured as a failed
    call (its output the error), so what the session then found that runs the tests is learned as its fix. The
    same words read from a file are not."""
    from bench.testbed.agent_transcripts import shell_output
    from bench.testbed.transcripts import Conversation, write_conversations

    claude = Conversation("cccccccc-0000-4000-8000-000000000001", cwd="/tmp/shop-api")
    claude.user("Run the auth service spec")
    claude.bash(RAN_NONE_COMMAND, JEST_RAN_NONE)
    # A file that quotes the words is read, not run (the read tool numbers its lines).
    claude.tool("Read", {"file_path": "/tmp/shop-api/docs/testing.md"}, "     1\tNo tests found, exiting with code 0")
    claude.say("No tests ran.", end_turn=True)
    write_conversations(tmp_path / "projects", claude)
    [claude_file] = (tmp_path / "projects").glob("*/*.jsonl")
    rollout = Rollout(codex_home, cwd="/tmp/shop-api")
    rollout.prompt("Run the auth service spec")
    rollout.exec_command(RAN_NONE_COMMAND, JEST_RAN_NONE, exit_code=0)
    rollout.answer("No tests ran.")
    chat = Chat(gemini_dir, project="/tmp/shop-api", slug="shop-api")
    chat.prompt("Run the auth service spec")
    first = chat.reply("Let me run it.")
    ran = chat.tool_call("run_shell_command", {"command": RAN_NONE_COMMAND}, shell_output(JEST_RAN_NONE, 0))
    chat.reply("Let me run it.", message_id=first, tool_calls=[ran])
    chat.results([ran])
    chat.reply("No tests ran.")
    for path in (claude_file, rollout.write(), chat.write()):
        tailer.tail(path)
    failed = conn.execute("SELECT s.agent, t.tool, t.error FROM tool_calls t JOIN sessions s "
                          "ON s.session_id = t.session_id WHERE t.failed = 1 ORDER BY s.agent").fetchall()
    assert [(agent, tool) for agent, tool, _ in failed] == [("claude", "Bash"), ("codex", "Bash"), ("gemini", "Bash")]
    assert all("No tests found, exiting with code 0" in error for _, _, error in failed)
