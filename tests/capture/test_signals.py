"""Commit messages, tracker reasons and the user's answers become episodes of their own, once they succeeded."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture import signals
from processor.capture.tailer import Tailer
from processor.config import load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import Episodizer
from processor.store import open_store

SID = "5e5e5e5e-0000-0000-0000-000000000009"
HEREDOC = ("git add -A && git commit -m \"$(cat <<'EOF'\nFix flaky upload retry\n\n"
           "The retry loop now resets its timer.\nEOF\n)\"")


def compact(line: str) -> str:
    # Claude Code writes compact JSON; the capture's byte-level shortcut is tuned to it.
    return json.dumps(json.loads(line), separators=(",", ":")) + "\n"


def tool_use(tool_id: str, name: str, tool_input: object, uid: str) -> str:
    return compact(assistant_line([{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}],
                                  session_id=SID, uid=uid, message_id=f"m_{uid}", cwd="/work/app"))


def tool_result(tool_id: str, output: str, uid: str, is_error: bool = False) -> str:
    return compact(user_line([{"type": "tool_result", "tool_use_id": tool_id, "content": output,
                               "is_error": is_error}], session_id=SID, uid=uid, cwd="/work/app",
                             timestamp="2026-11-01T10:00:07.000Z"))


@pytest.fixture
def store(engram_home: Path) -> EpisodeStore:
    settings = load_settings()
    conn = open_store(settings.db_path)
    yield EpisodeStore(settings, conn)
    conn.close()


def capture(store: EpisodeStore, transcript: Path, *lines: str) -> None:
    with open(transcript, "a") as f:
        f.writelines(lines)
    Tailer(store.conn).tail(transcript)  # a fresh Tailer each time: nothing is kept in memory between calls


def signal_episodes(store: EpisodeStore) -> list[tuple[str, str, str]]:
    return store.conn.execute("SELECT kind, full_content, source_uuids FROM episodes WHERE source_type = 'auto' "
                              "ORDER BY rowid").fetchall()


def test_commit_messages_are_read_from_every_form() -> None:
    assert signals.from_bash('git commit -m "Add cache" -m "Keyed by locale."').text == "Add cache\n\nKeyed by locale."
    assert signals.from_bash(HEREDOC).text == "Fix flaky upload retry\n\nThe retry loop now resets its timer."
    assert signals.from_bash("git -C repo commit -am 'Bump version'").text == "Bump version"
    assert signals.from_bash("git commit --message=Tidy && git push").text == "Tidy"
    assert signals.from_bash("git status && git log --oneline") is None
    assert signals.from_bash("git commit -m 'unbalanced") is None
    # A heredoc body is raw text: its quotes stay, and cannot unbalance the command around it.
    quoted = "git commit -m \"$(cat <<'EOF'\nMark \"!CORRUPTED\" entries; don't skip them\nEOF\n)\" && git push"
    assert signals.from_bash(quoted).text == "Mark \"!CORRUPTED\" entries; don't skip them"
    tracker = "gh issue close 7 --comment \"$(cat <<'EOF'\nFixed by 'a1b2c3d'\nEOF\n)\""
    assert signals.from_bash(tracker).text == "gh issue close: Fixed by 'a1b2c3d'"
    closed = signals.from_bash('bd close eng-12 --reason "Chose SQLite over Postgres: one file"')
    assert closed.text == "bd close: Chose SQLite over Postgres: one file"
    assert signals.kind_of(closed.text) == "decision"
    assert "Crash on empty input" in signals.from_bash('gh issue create --title "Crash on empty input" --body x').text
    assert signals.from_bash('gh pr create --body "$(cat <<\'EOF\'\nSwitched to uv\nEOF\n)"').text == (
        "gh pr create: Switched to uv")


def test_a_commit_message_becomes_an_episode(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    capture(store, transcript, compact(user_line("commit it", session_id=SID, uid="q1", cwd="/work/app")),
            tool_use("toolu_1", "Bash", {"command": HEREDOC}, "a1"))
    # The result arrives later, read by another Tailer (as after a restart): the pending use was stored.
    capture(store, transcript, tool_result("toolu_1", "[main 1a2b3c4] Fix flaky upload retry\n 1 file changed", "r1"))
    Episodizer(store).episodize(final=True)
    [(kind, content, uuids)] = signal_episodes(store)
    assert kind == "bugfix"
    assert content == "Committed 1a2b3c4 on `main`: Fix flaky upload retry\n\nThe retry loop now resets its timer."
    assert json.loads(uuids) == ["a1", "r1"]
    [hit] = store.recall("flaky upload retry commit", limit=1)
    assert hit.bite.startswith("Committed 1a2b3c4 on `main`: Fix flaky upload retry")
    assert Episodizer(store).episodize(final=True) == 0  # built once


def test_a_failed_or_hook_rejected_commit_is_not_remembered(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    capture(store, transcript, compact(user_line("commit it", session_id=SID, uid="q1", cwd="/work/app")),
            tool_use("toolu_1", "Bash", {"command": 'git commit -m "Add secret sauce"'}, "a1"),
            tool_result("toolu_1", "pre-commit hook failed: ruff found 3 errors", "r1", is_error=True),
            tool_use("toolu_2", "Bash", {"command": 'git commit -m "Add secret sauce"'}, "a2"),
            tool_result("toolu_2", "On branch main\nnothing to commit, working tree clean", "r2"))
    Episodizer(store).episodize(final=True)
    assert signal_episodes(store) == []


def test_an_answer_to_ask_user_question_becomes_an_episode(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    question = {"questions": [{"question": "How should corrupted archives be reported?", "header": "Errors",
                               "options": [{"label": "Marker entry"}, {"label": "Extra field"}]}]}
    capture(store, transcript, compact(user_line("go", session_id=SID, uid="q1", cwd="/work/app")),
            tool_use("toolu_9", "AskUserQuestion", question, "a1"),
            tool_result("toolu_9", 'User has answered your questions: "How should corrupted archives be reported?"'
                        '="Extra field". You can now continue with the user\'s answers in mind.', "r1"))
    Episodizer(store).episodize(final=True)
    [(_, content, _)] = signal_episodes(store)
    assert content == ('Asked the user: How should corrupted archives be reported?\n'
                       'The user answered: "How should corrupted archives be reported?"="Extra field"')


def test_wrong_input_types_are_logged_once_and_never_crash(store: EpisodeStore, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    signals._warned.clear()
    transcript = tmp_path / f"{SID}.jsonl"
    with caplog.at_level(logging.WARNING, logger="processor.capture.signals"):
        capture(store, transcript, compact(user_line("go", session_id=SID, uid="q1", cwd="/work/app")),
                tool_use("t1", "Bash", {"command": ["git", "commit"]}, "a1"),
                tool_use("t2", "Bash", "git commit -m x", "a2"),
                tool_use("t3", "AskUserQuestion", {"questions": "which?"}, "a3"))
    assert len([r for r in caplog.records if "Bash" in r.getMessage()]) == 1
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 4  # the lines are still captured


def test_secrets_in_commit_messages_are_redacted(store: EpisodeStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    key = "sk-ant-api03-" + "a1B2" * 20
    capture(store, transcript, compact(user_line("commit", session_id=SID, uid="q1", cwd="/work/app")),
            tool_use("toolu_1", "Bash", {"command": f'git commit -m "Rotate key {key}"'}, "a1"),
            tool_result("toolu_1", "[main abcdef1] Rotate key", "r1"))
    Episodizer(store).episodize(final=True)
    [(_, content, _)] = signal_episodes(store)
    assert key not in content and "Rotate key" in content
    assert key not in store.conn.execute("SELECT group_concat(pending) FROM tool_signals").fetchone()[0]


@pytest.mark.parametrize(("line", "said"), [
    ("[main 63dbde7] docs: start work on todo", "Committed 63dbde7 on `main`: docs"),
    ("[main (root-commit) 1a2b3c4] Initial commit", "Committed 1a2b3c4 on `main`: docs"),
    ("[feat/phase-12.2-encrypted-device-registry 1a12108e3] fix(12.2): mount the hook",
     "Committed 1a12108e3 on `feat/phase-12.2-encrypted-device-registry`: docs"),
    ("[detached HEAD 5c2f142] wip", "Committed 5c2f142: docs"),  # on no branch: a pull never meets it
])
def test_a_commits_memory_names_the_branch_git_put_it_on(line: str, said: str) -> None:
    pending = signals.PendingSignal("commit", "docs", "commit_line")
    assert signals.outcome(pending, False, f"{line}\n 2 files changed, 10 insertions(+)") == said
