"""Lessons without an LLM: a failure, the diagnosis after it and the fix become one memory, told to a later
session when it is about to touch the same file or run the same command — and nothing else is told.

Real transcripts (Claude Code's line format, tool uses and results), the real processor pass (capture,
episodes), the real embedding model, and the real PreToolUse hook as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.testbed.transcripts import Conversation, write_conversations
from processor.config import load_settings
from processor.memory.diagnosis import diagnosis_kind, reason_of
from processor.memory.episode_store import EpisodeStore
from processor.memory.failed_calls import users_words
from processor.recall import forget
from processor.recall.injections import ingest
from processor.recall.recollections import RecollectionWriter
from processor.service.run_loop import Processor
from processor.store import open_store
from processor.store import tool_calls as tool_call_sql
from tests.conftest import REPO

CWD = "/work/shop"  # not on this machine: the project is the cwd itself
S1 = "11111111-0000-4000-8000-000000000001"
S2 = "11111111-0000-4000-8000-000000000002"
S3 = "11111111-0000-4000-8000-000000000003"
IGNORED = ("The following paths are ignored by one of your .gitignore files:\ndist\n"
           "hint: Use -f if you really want to add them.")
DIAGNOSIS = "The `dist/` folder is git-ignored, so the generated `dist/app.js` must be force-added with `git add -f`."


def gitignore_session(session_id: str = S1, start: str = "2026-11-01T10:00:00") -> Conversation:
    c = Conversation(session_id, cwd=CWD, start=start)
    c.user("Build the bundle and commit it")
    c.say("I'll build the bundle first.")
    c.bash("npm run build", "built dist/app.js in 1.2s")
    c.bash("git add dist/app.js", IGNORED, error=True)
    c.say(DIAGNOSIS)
    c.bash("git add -f dist/app.js")
    c.bash('git commit -m "Build the bundle"', "[main 1a2b3c4] Build the bundle")
    c.say("Done: the bundle is built and committed.", end_turn=True)
    return c


def process(projects: Path) -> EpisodeStore:
    settings = load_settings()
    Processor(settings).run_once(None)
    return EpisodeStore(settings, open_store(settings.db_path))


def memories(store: EpisodeStore, kind: str | None = None) -> list:
    rows = store.conn.execute("SELECT id, kind, summary, full_content, entities, source_uuids FROM episodes "
                              "WHERE source_type != 'verbatim' AND status = 'active'" +
                              (" AND kind = ?" if kind else ""), (kind,) if kind else ()).fetchall()
    return rows


def test_a_failure_its_diagnosis_and_fix_become_one_lesson(engram_home: Path, projects_dir: Path) -> None:
    session = gitignore_session()
    write_conversations(projects_dir, session)
    store = process(projects_dir)
    [lesson] = memories(store, "gotcha")
    _, kind, summary, content, entities, sources = lesson
    assert summary == DIAGNOSIS  # one sentence, the session's own words
    assert "Failed: `git add dist/app.js`" in content and "ignored by one of your .gitignore files" in content
    assert "`git add -f dist/app.js` ran clean" in content
    assert "$ git add dist/app.js" in json.loads(entities)
    assert set(json.loads(sources)) <= set(session.uuids) and len(json.loads(sources)) >= 3
    # Rebuilding the same transcript makes no second lesson.
    Processor(load_settings()).run_once(None)
    assert len(memories(store, "gotcha")) == 1


def test_no_lesson_from_an_unfixed_failure_a_declined_call_or_narration(engram_home: Path,
                                                                        projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Deploy the site")
    c.bash("npm run deploy", "Error: missing VERCEL_TOKEN", error=True)
    c.say("The issue is that the `VERCEL_TOKEN` variable is not set in this shell.")
    c.bash("npm run deploy", "Error: missing VERCEL_TOKEN", error=True)  # never fixed
    c.say("I could not deploy; please set the token.", end_turn=True)
    c.user("Commit the build")
    c.bash('git commit -am "build"', "Wait, run the tests first", error=True)  # the user's own words
    c.say("The issue is that the tests must run before `git commit` in this repository.")
    c.bash('git commit -am "build"', "[main 9f9f9f9] build")
    c.user("Run the linter")
    c.bash("npm run lint", "Error: 3 problems", error=True)
    c.say("Let me fix the `eslint` problems in `src/app.ts` and run it again.")  # narration, not a diagnosis
    c.edit(f"{CWD}/src/app.ts")
    c.bash("npm run lint", "0 problems")
    c.say("Lint is clean.", end_turn=True)
    write_conversations(projects_dir, c)
    assert memories(process(projects_dir), "gotcha") == [] and memories(process(projects_dir), "bugfix") == []


def test_a_flag_given_a_value_is_a_fix_and_a_bare_one_a_question(engram_home: Path, projects_dir: Path) -> None:
    """``--version 1.2.0`` passes a version: it is what fixed the failure. ``--version`` alone only asks the
    program its version, as ``--help`` reads about it: never a fix."""
    c = Conversation(S1, cwd=CWD)
    c.user("Release it")
    c.bash("python3 tools/release.py", "release.py: error: the following arguments are required: --version",
           error=True)
    c.bash("python3 tools/release.py --version", "release.py: error: argument --version: expected one argument",
           error=True)
    c.bash("python3 tools/release.py --help", "usage: release.py [-h] --version VERSION")
    c.bash("python3 tools/release.py --version 1.2.0", "released 1.2.0")
    c.say("Released 1.2.0.", end_turn=True)
    write_conversations(projects_dir, c)
    found = memories(process(projects_dir), "gotcha")
    first = [content for _, _, _, content, _, _ in found if "arguments are required" in content]
    assert first and "What fixed it: `python3 tools/release.py --version 1.2.0`" in first[0], found
    assert not any("--help" in content for _, _, _, content, _, _ in found)


def test_a_megabyte_error_is_kept_as_its_head_and_tail(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Run the tests")
    c.bash("pytest -q", "E" * 1_000_000 + "\nFAILED tests/test_x.py::test_y - AssertionError", error=True)
    write_conversations(projects_dir, c)
    store = process(projects_dir)
    [call] = [call for call in tool_call_sql.session_calls(store.conn, S1) if call.failed]
    assert len(call.error) < 2_000 and call.error.endswith("test_y - AssertionError")


@pytest.mark.parametrize("sentence, kind", [
    ("SQLite doesn't support `ALTER TABLE … MODIFY`, so the migration must rewrite the table instead.", "gotcha"),
    ("The issue is that `parse_date` returns None for an empty string.", "bugfix"),
    ("Now let me run the tests again to make sure everything passes.", None),
    ("All 27 tests pass.", None),
    ("Le problème est que la table `users` n'existe pas encore.", None),  # no English cue: no lesson
    ("The issue is that it fails.", None),  # says nothing it is about
    ("The `ty` type checker has an issue with `pytest.skip()`.", "gotcha"),
    # A guess at a constraint is not one (dev's "`ty` … seems to have issues with it": both readers, related).
    ("The `ty` type checker seems to have an issue with `pytest.skip()`.", None),
])
def test_what_counts_as_a_diagnosis(sentence: str, kind: str | None) -> None:
    assert diagnosis_kind(sentence) == kind


def test_a_narrated_fix_gives_its_reason() -> None:
    said = ("Let me try a type ignore comment for this case since `pytest.skip()` is a valid call but the `ty` "
            "type checker seems to have issues with it.")
    assert reason_of(said).startswith("`pytest.skip()` is a valid call")
    assert diagnosis_kind(reason_of(said)) is None  # "seems to have issues": a guess
    assert diagnosis_kind(reason_of(said.replace("seems to have", "has"))) == "gotcha"
    assert reason_of("Let me run the tests.") == "Let me run the tests."  # no reason: stays narration


def test_a_declined_call_is_the_users_words_not_an_error() -> None:
    assert users_words("Wait a sec, we need to copy public/favicons/token.svg to the other repo too")
    assert not users_words("Exit code 1\nerror: pathspec 'x' did not match any file(s) known to git")
    assert not users_words("fatal: not a git repository (or any of the parent directories): .git")


# --- told when it applies, once, and never about a new file -----------------------------------------------


def hook(home: Path, event: dict) -> str:
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / "pretooluse.py")],
                          input=json.dumps(event).encode(), capture_output=True, timeout=30,
                          env={"ENGRAM_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0
    return done.stdout.decode()


def call(session_id: str, name: str, tool_input: dict) -> dict:
    return {"session_id": session_id, "hook_event_name": "PreToolUse", "tool_name": name, "tool_input": tool_input,
            "cwd": CWD}


def later_session(engram_home: Path, projects_dir: Path, prompt: str) -> tuple[EpisodeStore, str]:
    """The gitignore lesson learned in S1; S2's user message is written to its recollection file."""
    write_conversations(projects_dir, gitignore_session())
    store = process(projects_dir)
    [(lesson_id, *_)] = memories(store, "gotcha")
    path = RecollectionWriter(load_settings()).write(store, S2, "u-s2-1", prompt, project=CWD)
    assert path is not None
    return store, lesson_id


def test_a_lesson_is_told_before_the_command_it_is_about_once_per_session(engram_home: Path,
                                                                           projects_dir: Path) -> None:
    _, lesson_id = later_session(engram_home, projects_dir, "Rebuild the bundle after the API change")
    assert hook(engram_home, call(S2, "Bash", {"command": "npm run build"})) == ""  # not about the build
    out = hook(engram_home, call(S2, "Bash", {"command": "git add dist/app.js && git commit -m x"}))
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert lesson_id in context and "force-added" in context and "git add dist/app.js" in context
    assert "permissionDecision" not in out
    assert hook(engram_home, call(S2, "Bash", {"command": "git add dist/app.js"})) == ""  # once per session


def test_a_read_of_a_file_with_a_lesson_tells_it_once(engram_home: Path, projects_dir: Path) -> None:
    _, lesson_id = later_session(engram_home, projects_dir, "Look at the bundle")
    out = hook(engram_home, call(S2, "Read", {"file_path": f"{CWD}/dist/app.js"}))
    assert lesson_id in out
    assert hook(engram_home, call(S2, "Read", {"file_path": f"{CWD}/dist/app.js"})) == ""
    assert hook(engram_home, call(S2, "Edit", {"file_path": f"{CWD}/dist/app.js", "old_string": "a",
                                               "new_string": "b"})) == ""


def test_nothing_about_a_file_the_agent_creates(engram_home: Path, projects_dir: Path, tmp_path: Path) -> None:
    later_session(engram_home, projects_dir, "Start over with a fresh bundle")
    # The lesson is filed under dist/app.js; here that path does not exist: the agent is creating it.
    assert hook(engram_home, call(S2, "Write", {"file_path": f"{CWD}/dist/app.js", "content": "x"})) == ""
    assert hook(engram_home, call(S2, "Read", {"file_path": f"{CWD}/dist/app.js"})) == ""  # its own new file


def test_nothing_is_told_when_nothing_clears_the_bar(engram_home: Path, projects_dir: Path) -> None:
    later_session(engram_home, projects_dir, "Please explain what the checkout page does")
    recollection = json.loads((engram_home / "recollections" / f"{S2}.json").read_text())
    assert recollection["bites"] == []
    for event in (call(S2, "Read", {"file_path": f"{CWD}/src/checkout.ts"}),
                  call(S2, "Bash", {"command": "npm test"}), call(S2, "Grep", {"pattern": "checkout"})):
        assert hook(engram_home, event) == ""


# --- the routine ------------------------------------------------------------------------------------------


def closing_task(c: Conversation, change: str) -> None:
    c.user(f"Change {change}")
    c.edit(f"{CWD}/src/{change}.py")
    c.bash("uv run pytest -q", "12 passed")
    c.bash("uv run ruff check .", "All checks passed!")
    c.bash(f'git commit -am "{change}"', "[main 1234567] x")
    c.say("Done.", end_turn=True)


def test_a_close_out_routine_repeated_across_sessions_becomes_one_convention(engram_home: Path,
                                                                            projects_dir: Path) -> None:
    first, second = Conversation(S1, cwd=CWD), Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    closing_task(first, "prices")
    closing_task(first, "taxes")
    closing_task(second, "coupons")
    write_conversations(projects_dir, first, second)
    store = process(projects_dir)
    [(routine_id, _, summary, *_)] = memories(store, "convention")
    assert summary == ("Close-out routine: `uv run pytest -q` → `uv run ruff check .` → `git commit` "
                       "(3 tasks, 2 sessions).")
    # Recalled when asked for, never told unasked: every session already has its habit in front of it (read moment
    # by moment, the routine told at a test run or a commit was never what the session needed).
    RecollectionWriter(load_settings()).write(store, S3, "u-s3", "Change the shipping rules", project=CWD)
    assert hook(engram_home, call(S3, "Bash", {"command": "uv run pytest -q"})) == ""
    assert hook(engram_home, call(S3, "Bash", {"command": "git commit -am y"})) == ""
    assert routine_id in [hit.id for hit in store.recall("how does a task close out here?", project=CWD, limit=10)]


def test_a_forgotten_lesson_is_never_told_again(engram_home: Path, projects_dir: Path) -> None:
    store, lesson_id = later_session(engram_home, projects_dir, "Rebuild the bundle")
    forget.forget(store, load_settings(), lesson_id)
    index = next((engram_home / "recollections" / "lessons").iterdir()).read_text()
    assert lesson_id not in index
    assert hook(engram_home, call(S2, "Bash", {"command": "git add dist/app.js"})) == ""


def test_what_was_told_about_a_call_is_recorded_for_the_viewer_once(engram_home: Path, projects_dir: Path) -> None:
    store, lesson_id = later_session(engram_home, projects_dir, "Rebuild the bundle")
    assert lesson_id in hook(engram_home, call(S2, "Bash", {"command": "git add dist/app.js"}))
    folder = engram_home / "recollections"
    assert ingest(store.conn, folder) == 1 and ingest(store.conn, folder) == 0
    [(content,)] = store.conn.execute("SELECT content FROM injections WHERE session_id = ? AND message_uuid = ?",
                                      (S2, f"tool:{lesson_id}")).fetchall()
    assert json.loads(content)[0]["bite"] == DIAGNOSIS


def test_the_session_that_learned_a_lesson_is_not_told_it(engram_home: Path, projects_dir: Path) -> None:
    later_session(engram_home, projects_dir, "Rebuild the bundle")
    RecollectionWriter(load_settings()).write(process(projects_dir), S1, "u-s1-2", "And once more", project=CWD)
    assert hook(engram_home, call(S1, "Bash", {"command": "git add dist/app.js"})) == ""
    assert "force-added" in hook(engram_home, call(S2, "Bash", {"command": "git add dist/app.js"}))


def test_a_tool_gotcha_is_told_before_the_next_session_runs_that_tool(engram_home: Path, projects_dir: Path) -> None:
    """The issue's example: generated migrations use an ALTER … MODIFY that SQLite rejects."""
    c = Conversation(S1, cwd=CWD)
    c.user("Make users.email required")
    c.bash("npx drizzle-kit generate", "[✓] migration drizzle/0003_email.sql created")
    c.bash("npx drizzle-kit migrate", 'SqliteError: near "MODIFY": syntax error\n    at Database.exec', error=True)
    c.say("SQLite doesn't support `ALTER TABLE … MODIFY`, so the generated migration must rewrite the table "
          "instead (create the new table, copy the rows, drop the old one, rename).")
    c.edit(f"{CWD}/drizzle/0003_email.sql")
    c.bash("npx drizzle-kit migrate", "[✓] migrations applied")
    c.say("users.email is now required.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process(projects_dir)
    [(lesson_id, kind, summary, content, *_)] = memories(store, "gotcha")
    assert summary.startswith("SQLite doesn't support `ALTER TABLE … MODIFY`")
    assert 'near "MODIFY": syntax error' in content and "drizzle/0003_email.sql" in content
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Make users.name required too", project=CWD)
    assert hook(engram_home, call(S2, "Bash", {"command": "npx drizzle-kit generate"})) == ""
    assert lesson_id in hook(engram_home, call(S2, "Bash", {"command": "npx drizzle-kit migrate"}))


def test_a_routine_never_teaches_what_the_user_forbade_or_declined(engram_home: Path, projects_dir: Path) -> None:
    """Sessions that staged everything with `git add -A` before each commit do not make it a rule when the user
    forbade it (a rule of the project) or declined it; a file a task staged is that task's, not the routine's."""
    def task(c: Conversation, change: str, stage: str) -> None:
        c.user(f"Change {change}")
        c.edit(f"{CWD}/src/{change}.py")
        c.bash(stage, "")
        c.bash("uv run pytest -q", "12 passed")
        c.bash(f'git commit -m "{change}"', "[main 1234567] x")
        c.say("Done.", end_turn=True)

    first, second = Conversation(S1, cwd=CWD), Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    first.user("Never use `git add -A` in this repository: my diary files are not to be committed.")
    first.say("Understood.", end_turn=True)
    task(first, "prices", "git add -A")
    task(first, "taxes", "git add -A")
    task(second, "coupons", "git add -A")
    task(second, "returns", "git add CLAUDE.md")
    write_conversations(projects_dir, first, second)
    store = process(projects_dir)
    [(_, _, summary, *_)] = [m for m in memories(store, "convention") if m[2].startswith("Close-out")]
    assert "git add" not in summary and "`uv run pytest -q` → `git commit`" in summary


def test_a_warning_told_session_after_session_keeps_being_told(engram_home: Path, projects_dir: Path) -> None:
    """A warning the agent then followed is a success, not proof it was unneeded: however many sessions heard a
    lesson without failing again, the next one that is about to make the mistake hears it too."""
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the fix")
    c.edit(f"{CWD}/src/cart.py")
    c.bash("git add -A && git status", "new file: notes/day-004.md\nmodified: src/cart.py")
    c.bash("git reset notes/", "Unstaged changes after reset:\nM\tnotes/day-004.md")
    c.bash('git commit -m "Fix the cart"', "[main 1a2b3c4] Fix the cart")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process(projects_dir)
    writer = RecollectionWriter(load_settings())
    later = [f"11111111-0000-4000-8000-00000000001{i}" for i in range(5)]
    for session in later:
        writer.write(store, session, f"u-{session}", "Commit the coupon change", project=CWD)
        assert "git reset notes/" in hook(engram_home, call(session, "Bash", {"command": "git add -A"}))
        ingest(store.conn, engram_home / "recollections")


def test_staging_everything_that_had_to_be_undone_is_told_before_staging_everything(engram_home: Path,
                                                                                      projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the fix")
    c.edit(f"{CWD}/src/cart.py")
    c.bash("git add -A && git status", "new file: notes/day-004.md\nmodified: src/cart.py")
    c.bash("git reset notes/", "Unstaged changes after reset:\nM\tnotes/day-004.md")
    c.bash('git commit -m "Fix the cart"', "[main 1a2b3c4] Fix the cart")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process(projects_dir)
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Commit the coupon change", project=CWD)
    told = hook(engram_home, call(S2, "Bash", {"command": "git add src/coupons.py"}))
    assert told == ""  # staging one file: nothing to say
    told = hook(engram_home, call(S2, "Bash", {"command": "git add . && git commit -m coupons"}))
    assert "`git add -A` here also staged `notes/`" in told and "stage the changed files by name" in told
