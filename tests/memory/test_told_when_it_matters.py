"""Told when it matters: facts about the file in hand, decisions in the user's words, and nothing told twice.

Real transcripts, the real processor pass, the real embedding model, and the real hooks as subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.testbed.transcripts import Conversation, write_conversations
from processor.config import load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.preferences import standing_statements
from processor.recall.recollections import RecollectionWriter
from processor.service.run_loop import Processor
from processor.store import open_store
from tests.conftest import REPO

CWD = "/work/shop"
S1, S2, S3 = (f"33333333-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))


def process() -> EpisodeStore:
    settings = load_settings()
    Processor(settings).run_once(None)
    return EpisodeStore(settings, open_store(settings.db_path))


def hook(script: str, home: Path, event: dict) -> str:
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / script)],
                          input=json.dumps(event).encode(), capture_output=True, timeout=30,
                          env={"ENGRAM_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and not done.stderr, done.stderr
    out = done.stdout.decode()
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def before(home: Path, session_id: str, tool: str, tool_input: dict) -> str:
    return hook("pretooluse.py", home, {"session_id": session_id, "hook_event_name": "PreToolUse", "cwd": CWD,
                                        "tool_name": tool, "tool_input": tool_input})


def memories(store: EpisodeStore, miner: str) -> list[tuple]:
    return store.conn.execute("SELECT e.id, e.kind, e.summary FROM episodes e JOIN memory_origins o ON "
                              "o.episode_id = e.id WHERE o.miner = ? AND e.status = 'active'", (miner,)).fetchall()


def exploring_session() -> Conversation:
    c = Conversation(S1, cwd=CWD)
    c.user("Add a controller test for the checkout")
    c.tool("Grep", {"pattern": "ConnCase", "path": CWD}, "No files found")
    c.read(f"{CWD}/test/test_helper.exs")
    c.say("There is no `ConnCase` module in this project — the tests use plain `ExUnit.Case` with the helpers "
          "in `test/test_helper.exs`.")
    c.tool("Glob", {"pattern": "assets/**/*.css"}, f"{CWD}/assets/vendor/xterm.css")
    c.bash("git check-ignore -v assets/vendor/xterm.css", ".gitignore:4:assets/vendor/\tassets/vendor/xterm.css")
    c.say("The stylesheet `assets/vendor/xterm.css` was force-added: its folder is git-ignored.")
    c.write(f"{CWD}/test/checkout_controller_test.exs")
    c.say("Let me check whether `mix test` passes now.")  # narration: no fact
    c.say("Done.", end_turn=True)
    return c


def test_a_fact_about_a_path_is_told_when_a_later_session_touches_it_once(engram_home: Path,
                                                                        projects_dir: Path) -> None:
    write_conversations(projects_dir, exploring_session())
    store = process()
    facts = {summary: fact_id for fact_id, kind, summary in memories(store, "fact")}
    assert len(facts) == 2 and all(kind == "fact" for _, kind, _ in memories(store, "fact"))
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Write a test for the cart controller", project=CWD)
    # Looking for the module, or opening the file it would be in: told.
    told = before(engram_home, S2, "Read", {"file_path": f"{CWD}/test/support/conn_case.ex"})
    assert "There is no `ConnCase` module" in told
    assert before(engram_home, S2, "Grep", {"pattern": "ConnCase"}) == ""  # once a session
    # Staging another file of the ignored folder: told why and how.
    staged = before(engram_home, S2, "Bash", {"command": "git add assets/vendor/app.css"})
    assert "was force-added" in staged
    assert before(engram_home, S2, "Read", {"file_path": f"{CWD}/lib/shop.ex"}) == ""  # about nothing it touches
    # The session that found them has them in its context.
    assert before(engram_home, S1, "Grep", {"pattern": "ConnCase"}) == ""


def test_a_compaction_lets_a_memory_be_told_again(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, exploring_session())
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Write a test for the cart controller", project=CWD)
    assert "ConnCase" in before(engram_home, S2, "Grep", {"pattern": "ConnCase"})
    assert before(engram_home, S2, "Grep", {"pattern": "ConnCase"}) == ""
    hook("session_start.py", engram_home, {"session_id": S2, "hook_event_name": "SessionStart", "cwd": CWD,
                                           "source": "compact"})
    assert "ConnCase" in before(engram_home, S2, "Grep", {"pattern": "ConnCase"})


def test_a_users_decision_is_told_at_a_later_prompt_about_what_it_names(engram_home: Path,
                                                                        projects_dir: Path) -> None:
    decision = "Decision for the billing service: we use PostgreSQL 16 for the billing database, never MySQL."
    c = Conversation(S1, cwd=CWD)
    c.user(decision)
    c.say("Noted: PostgreSQL 16 for billing.", end_turn=True)
    c.user("Now fix the typo in the README")
    c.edit(f"{CWD}/README.md")
    c.say("Fixed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(decision_id, kind, summary)] = memories(store, "decision")
    assert kind == "decision" and summary == decision
    path = RecollectionWriter(load_settings()).write(store, S2, "u-s2",
                                                     "Set up the database connection for the billing service",
                                                     project=CWD)
    bites = json.loads(Path(path).read_text())["bites"]
    assert [b["id"] for b in bites] == [decision_id]
    # Asked about something else, silence.
    quiet = RecollectionWriter(load_settings()).write(store, S3, "u-s3", "Make the header sticky on mobile",
                                                      project=CWD)
    assert json.loads(Path(quiet).read_text())["bites"] == []
    # And before a call that runs what it rules out.
    assert "never MySQL" in before(engram_home, S3, "Bash", {"command": "mysql -u root -e 'create database bills'"})


def test_a_one_off_remark_is_not_a_preference() -> None:
    assert standing_statements("I prefer our original message for the release notes — no need for you to get "
                               "creative with it now, is there?!") == []
    assert standing_statements("I hate wasting credits on long test runs, I'd rather you ran only the failing "
                               "test.") == []
    assert standing_statements("I'd prefer this one for now.") == []
    [kept] = standing_statements("I prefer small commits with one change each.")
    assert kept.kind == "preference"
    [rule] = standing_statements("Never use `git add -A` in this repository.")
    assert rule.kind == "convention"


def test_no_memory_is_told_twice_in_a_session_by_any_hook(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, exploring_session())
    store = process()
    [fact_id] = [i for i, _, s in memories(store, "fact") if "ConnCase" in s]
    # The prompt's bites tell it first (a prompt about ConnCase)...
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Create a ConnCase module for the controller tests",
                                              project=CWD)
    assert before(engram_home, S2, "Read", {"file_path": f"{CWD}/mix.exs"}).count(fact_id) <= 1
    first = before(engram_home, S2, "Grep", {"pattern": "ConnCase"})
    second = before(engram_home, S2, "Read", {"file_path": f"{CWD}/test/support/conn_case.ex"})
    assert (first + second).count(fact_id) <= 1
    # ...and a later prompt's recollection leaves it out.
    path = RecollectionWriter(load_settings()).write(store, S2, "u-s2-b", "Where should the ConnCase module live?",
                                                     project=CWD)
    assert fact_id not in Path(path).read_text()
