"""Worth telling on a project no one tuned for (issue 35): each shape the held-out readers saw, on real session
lines, through the real processor pass, the real embedding model and the real hooks as subprocesses.

The lines quoted here are the tools' and harness's own output as real sessions recorded it (pre-commit's status
column, lint-staged's, Claude Code's `cd` refusal and Read limit); the conversations around them are built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.precision import FAILURE_HOOK
from bench.precision import run_hook as bench_hook
from bench.testbed.transcripts import Conversation, write_conversations
from processor.capture.claude import parse_line
from processor.config import load_settings
from processor.memory.environments import run_inside
from processor.memory.episode_store import EpisodeStore
from processor.memory.guards import forbidden_commands, guard
from processor.recall.injections import ingest
from processor.recall.recollections import RecollectionWriter
from processor.service.run_loop import Processor
from processor.store import open_store
from tests.conftest import REPO

CWD = "/work/shop"  # not on this machine: the project is the cwd itself
S1, S2, S3, S4, S5, S6 = (f"35353535-0000-4000-8000-00000000000{i}" for i in (1, 2, 3, 4, 5, 6))

# Real outputs, as sessions recorded them.
PRE_COMMIT = ("trim trailing whitespace.................................................Passed\n"
              "fix end of files.........................................................Failed\n"
              "- hook id: end-of-file-fixer\n- exit code: 1\n- files were modified by this hook\n\nFixing README.md\n\n"
              "check yaml...........................................(no files to check)Skipped\n")
LINT_STAGED = ("Exit code 1\n[STARTED] Backing up original state...\n[STARTED] Running tasks for staged files...\n"
               "[STARTED] *.md — 1 file\n[STARTED] markdownlint --fix\n[FAILED] markdownlint --fix [FAILED]\n"
               "[FAILED] markdownlint --fix [FAILED]\n[COMPLETED] Running tasks for staged files...\n"
               "husky - pre-commit script failed (code 1)\n")
READ_LIMIT = ("File content (56293 tokens) exceeds maximum allowed tokens (25000). Please use offset and limit "
              "parameters to read specific portions of the file, or use the GrepTool to search for specific content.")
CD_MOVED = ("Exit code 128\nwarning: could not open directory 'apps/web/apps/web/src/': No such file or directory\n"
            "fatal: pathspec 'apps/web/src/App.tsx' did not match any files")


def process(project: str = CWD) -> EpisodeStore:
    settings = load_settings()
    Processor(settings).run_once(None)
    store = EpisodeStore(settings, open_store(settings.db_path))
    writer = RecollectionWriter(settings)
    writer.lessons.refresh(store.conn, project, project)  # as the next user message would
    writer.files.refresh(store.conn, project, project)
    return store


def run_hook(script: str, home: Path, event: dict, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / script)],
                          input=json.dumps(event).encode(), capture_output=True, timeout=30,
                          env={"ENGRAM_HOME": str(home), "PATH": "/usr/bin:/bin", **(env or {})})
    assert done.returncode == 0 and not done.stderr, done.stderr
    out = done.stdout.decode()
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def before(home: Path, session: str, tool: str, tool_input: dict) -> str:
    return run_hook("pretooluse.py", home, {"session_id": session, "hook_event_name": "PreToolUse", "cwd": CWD,
                                            "tool_name": tool, "tool_input": tool_input, "tool_use_id": "toolu_b"})


def after(home: Path, session: str, command: str, error: str, cwd: str = CWD) -> str:
    return run_hook("tool_failure.py", home, {
        "session_id": session, "hook_event_name": "PostToolUseFailure", "cwd": cwd, "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": "toolu_a", "error": error, "is_interrupt": False})


def mined(store: EpisodeStore, miner: str) -> list[tuple]:
    return store.conn.execute("SELECT e.id, e.kind, e.summary, e.status FROM episodes e JOIN memory_origins o "
                              "ON o.episode_id = e.id WHERE o.miner = ? ORDER BY e.created_at", (miner,)).fetchall()


def commit_session(session: str, start: str, refusal: str) -> Conversation:
    c = Conversation(session, cwd=CWD, start=start)
    c.user("Commit the docs")
    c.bash('git commit -m "Docs"', refusal, error=True)
    c.bash("git add README.md")
    c.bash('git commit -m "Docs"', "[main 1a2b3c4] Docs")
    c.say("Committed.", end_turn=True)
    return c


# --- 1. a fix that is only the retry: the hook's own output is the lesson ---------------------------------------


@pytest.mark.parametrize(("refusal", "step"), [(PRE_COMMIT, "pre-commit run --all-files"),
                                               (LINT_STAGED, "markdownlint --fix")])
def test_a_commit_hooks_refusal_teaches_running_its_checks_first_not_the_retry(
        engram_home: Path, projects_dir: Path, refusal: str, step: str) -> None:
    write_conversations(projects_dir, commit_session(S1, "2026-11-01T10:00:00", refusal),
                        commit_session(S2, "2026-11-02T10:00:00", refusal))
    store = process()
    [(_, kind, summary, _)] = mined(store, "error_fix")
    assert kind == "gotcha" and summary.startswith(f"Before `git commit` here, run `{step}`"), summary
    assert "git add README.md" not in summary, summary
    # Before the next commit (it recurred in two sessions), and right after the same refusal; silent before a
    # commit that runs the checks first.
    told = before(engram_home, S3, "Bash", {"command": 'git commit -m "More docs"'})
    assert step in told and "git add README.md" not in told, told
    assert step in after(engram_home, S4, 'git commit -m "X"', refusal)
    # A session that ran the step itself knows it (BookMinder 05-30): its commits after are not told it, and the
    # viewer's ledger does not say it was.
    assert before(engram_home, S5, "Bash", {"command": f"cd {CWD} && {step} 2>&1 | tail -20"}) == ""
    assert before(engram_home, S5, "Bash", {"command": 'git commit -m "Docs"'}) == ""
    ingest(store.conn, engram_home / "recollections")
    assert not store.conn.execute("SELECT 1 FROM injections WHERE session_id = ?", (S5,)).fetchall()
    assert store.conn.execute("SELECT 1 FROM injections WHERE session_id = ?", (S3,)).fetchall()  # S3 was told


def clean_commit_session(session: str, start: str) -> Conversation:
    c = Conversation(session, cwd=CWD, start=start)
    c.user("Commit the API change")
    c.bash('git add src/api.ts && git commit -m "API"', "[main 5e6f7a8] API\n 1 file changed")
    c.say("Committed.", end_turn=True)
    return c


@pytest.mark.parametrize(("clean_sessions", "told_before"), [(1, True), (4, False)])
def test_a_refusal_met_in_few_of_the_sessions_that_commit_is_told_after_it_not_before_every_commit(
        engram_home: Path, projects_dir: Path, clean_sessions: int, told_before: bool) -> None:
    """cipher-box's husky check stopped 2 of some 20 sessions' commits (only when API files were staged): a fix
    told before every commit would be read for nothing in most. Before the command only while it meets the
    failure in at least half of the sessions that run it; right after the failure, always."""
    sessions = [commit_session(S1, "2026-11-01T10:00:00", LINT_STAGED),
                commit_session(S2, "2026-11-02T10:00:00", LINT_STAGED)]
    sessions += [clean_commit_session(f"35353535-0000-4000-8000-0000000001{n:02d}", f"2026-11-{3 + n:02d}T10:00:00")
                 for n in range(clean_sessions)]
    write_conversations(projects_dir, *sessions)
    process()
    told = before(engram_home, S3, "Bash", {"command": 'git commit -m "More docs"'})
    assert ("markdownlint --fix" in told) is told_before, told
    assert "markdownlint --fix" in after(engram_home, S4, 'git commit -m "X"', LINT_STAGED)


RUFF_REFUSAL = ("ruff.....................................................................Failed\n- hook id: ruff\n"
                "- files were modified by this hook\n\nFound 2 errors (2 fixed, 0 remaining).\n\n"
                "ruff-format..............................................................Passed\n")


def test_a_commit_hooks_lesson_is_told_before_a_commit_while_the_hook_goes_on_refusing_without_its_old_checks(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder edited `.pre-commit-config.yaml` in seven of its ten sessions (it dropped the whitespace hooks on
    05-25, added ruff and mypy) and its hook went on refusing the first commit of most sessions: before a commit,
    the step that avoids the refusal, not the checks the first refusals named (the configuration may have dropped
    them); right after a refusal, always; and once the recent sessions commit clean, no longer before."""
    first, second = (commit_session(S1, "2026-11-01T10:00:00", PRE_COMMIT),
                     commit_session(S2, "2026-11-02T10:00:00", PRE_COMMIT))
    edit = Conversation("35353535-0000-4000-8000-000000000201", cwd=CWD, start="2026-11-03T10:00:00")
    edit.user("Drop the whitespace hooks, use ruff")
    edit.edit(f"{CWD}/.pre-commit-config.yaml")
    edit.say("Done.", end_turn=True)
    again = [commit_session(f"35353535-0000-4000-8000-00000000020{n}", f"2026-11-0{n + 2}T10:00:00", RUFF_REFUSAL)
             for n in (2, 3)]
    write_conversations(projects_dir, first, second, edit, *again)
    process()
    told = before(engram_home, S3, "Bash", {"command": 'git commit -m "More"'})
    assert "run `pre-commit run --all-files` and stage what it changes" in told, told
    assert "end-of-file-fixer" not in told and "ruff" not in told, told  # the step, not the checks of a refusal
    assert "pre-commit run --all-files" in after(engram_home, S4, 'git commit -m "X"', RUFF_REFUSAL)
    clean = [clean_commit_session(f"35353535-0000-4000-8000-0000000003{n:02d}", f"2026-11-{10 + n:02d}T10:00:00")
             for n in range(4)]
    write_conversations(projects_dir, first, second, edit, *again, *clean)
    process()
    assert before(engram_home, "35353535-0000-4000-8000-000000000399", "Bash", {"command": 'git commit -m "M"'}) == ""
    assert "pre-commit run --all-files" in after(engram_home, S5, 'git commit -m "Y"', RUFF_REFUSAL)


def test_staging_and_committing_again_teaches_nothing(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Commit it")
    c.bash('git commit -m "Fix"', "error: some files were not staged\nno changes added to commit", error=True)
    c.bash("git add src/cart.py && git status", "modified: src/cart.py")
    c.bash('git commit -m "Fix"', "[main 1a2b3c4] Fix")
    c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    assert mined(process(), "error_fix") == []


def specs_without_venv(session: str, start: str, fix: str) -> Conversation:
    """A session whose bare `pytest` is not found, got past by running it in the virtualenv (`fix`)."""
    c = Conversation(session, cwd=CWD, start=start)
    c.user("Run the specs")
    c.bash("pytest specs/", "(eval):1: command not found: pytest", error=True)
    c.bash(fix, "12 passed")
    c.say("All green.", end_turn=True)
    return c


# --- 2. stale fixes: the command later ran clean without the fix -------------------------------------------------


def test_a_fix_the_project_no_longer_needs_is_retired_when_the_bare_command_runs_clean(
        engram_home: Path, projects_dir: Path) -> None:
    first = specs_without_venv(S1, "2026-11-01T10:00:00", "source venv/bin/activate && pytest specs/")
    later = Conversation(S2, cwd=CWD, start="2026-11-20T10:00:00")  # the project moved to an environment on PATH
    later.user("Run the specs again")
    later.bash("pytest specs/", "14 passed")
    later.say("All green.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(fix_id, _, _, status)] = mined(store, "error_fix")
    assert status == "active" and fix_id in after(engram_home, S3, "pytest specs/",
                                                  "(eval):1: command not found: pytest")
    write_conversations(projects_dir, first, later)
    store = process()
    [(_, _, _, status)] = mined(store, "error_fix")
    assert status == "stale"
    assert after(engram_home, S4, "pytest specs/", "(eval):1: command not found: pytest") == ""
    why = store.conn.execute("SELECT detail FROM cold_actions WHERE episode_id = ?", (fix_id,)).fetchone()[0]
    assert "ran clean without its fix" in why


@pytest.mark.parametrize(("removal", "then", "retired"), [
    ("cd /work/shop && rm -rf venv/ && uv venv", "source .venv/bin/activate && pytest specs/", True),
    ("rm -rf venv && python -m venv venv", "source venv/bin/activate && pytest specs/", False),  # made again
    ("rm -rf venv/lib/python3.9/site-packages/old", "source venv/bin/activate && pytest --version", False),  # in it
])
def test_a_fix_naming_a_folder_a_later_session_removed_is_retired(
        engram_home: Path, projects_dir: Path, removal: str, then: str, retired: bool) -> None:
    """BookMinder's "`source venv/bin/activate && pytest specs/ --spec`" was told for weeks after session 5 ran
    `rm -rf venv && uv venv` (the project's environment became `.venv`): a clean call that removed the folder a
    fix uses, and no later call of that session using it again, retires the fix."""
    first = specs_without_venv(S1, "2026-11-01T10:00:00", "source venv/bin/activate && pytest specs/")
    later = Conversation(S2, cwd=CWD, start="2026-11-20T10:00:00")
    later.user("Let's switch to uv")
    later.bash(removal, "")
    later.bash(then, "14 passed")
    later.say("Switched.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    [(fix_id, _, _, status)] = mined(store, "error_fix")
    assert (status == "stale") is retired
    told = after(engram_home, S3, "pytest specs/", "(eval):1: command not found: pytest")
    assert (fix_id in told) is not retired, told
    if retired:
        why = store.conn.execute("SELECT detail FROM cold_actions WHERE episode_id = ?", (fix_id,)).fetchone()[0]
        assert why.startswith("what fixed it uses `venv/`, which `cd /work/shop && rm -rf venv/"), why
        # The failure met again is learned again, the new way, and told from then on.
        third = specs_without_venv(S3, "2026-11-21T10:00:00", "source .venv/bin/activate && pytest specs/")
        write_conversations(projects_dir, first, later, third)
        process()
        assert ".venv/bin/activate" in after(engram_home, S4, "pytest specs/", "(eval):1: command not found: pytest")


def test_another_command_of_the_same_program_running_clean_retires_nothing(engram_home: Path,
                                                                           projects_dir: Path) -> None:
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Query the dev database")
    first.bash("node -e \"require('pg')\"", "Error: Cannot find module 'pg'", error=True)
    first.bash("cd apps/api && node -e \"require('pg')\"", "ok")
    first.say("Done.", end_turn=True)
    later = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    later.user("Print the version")
    later.bash("node -e \"console.log(process.version)\"", "v22.1.0")
    later.say("v22.", end_turn=True)
    write_conversations(projects_dir, first, later)
    assert [status for *_, status in mined(process(), "error_fix")] == ["active"]


# --- 3. the agent's own environment: the same refusal every time ----------------------------------------------


def test_a_recipe_whose_steps_use_a_removed_folder_is_retired_with_it(engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's recipe "To run `pytest` here: after "command not found: pytest", `source venv/bin/activate && …`;
    after "collected 0 items", …" was told before `pytest` for weeks after `rm -rf venv && uv venv`."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Run the specs")
    first.bash("pytest specs/ --spec", "(eval):1: command not found: pytest", error=True)
    first.bash("source venv/bin/activate && pytest specs/ --spec",
               "============================= test session starts ==============================\n"
               "collected 0 items\n\n============================ no tests ran in 0.01s =============================")
    first.bash("source venv/bin/activate && pytest specs/library_spec.py --spec", "4 passed in 0.28s")
    first.say("All green.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(recipe_id, _, recipe, status)] = mined(store, "recipe")
    assert status == "active" and "collected 0 items" in recipe, recipe
    later = Conversation(S2, cwd=CWD, start="2026-11-20T10:00:00")
    later.user("Let's switch to uv")
    later.bash("rm -rf venv && uv venv", "")
    later.bash("source .venv/bin/activate && pytest specs/library_spec.py --spec", "4 passed")
    later.say("Switched.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    assert [status for _, _, _, status in mined(store, "recipe")] == ["stale"]
    why = store.conn.execute("SELECT detail FROM cold_actions WHERE episode_id = ?", (recipe_id,)).fetchone()[0]
    assert why.startswith("its steps use `venv/`, which `rm -rf venv && uv venv` removed"), why
    assert "venv/bin/activate" not in before(engram_home, S3, "Bash", {"command": "pytest specs/ --spec"})


def test_a_fact_anchored_only_to_the_projects_own_name_is_not_told_at_every_call_naming_the_repository(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box's "The staging one uses `-U cipherbox` without specifying `-d`, …" was filed under `cipherbox`,
    the project's own name: told before `gh pr checks 131 --repo FSM1/cipher-box`."""
    project = "/work/cipher-box"
    c = Conversation(S1, cwd=project)
    c.user("Why can't the staging API reach its database?")
    c.bash("grep -rn DATABASE_URL .env.staging", ".env.staging:3:DATABASE_URL=postgres://...")
    c.say("The staging one uses `-U cipherbox` without specifying `-d`, so it tries to connect to database "
          "`cipherbox` which doesn't exist.", end_turn=True)
    write_conversations(projects_dir, c)
    settings = load_settings()
    Processor(settings).run_once(None)
    store = EpisodeStore(settings, open_store(settings.db_path))
    assert any("`-U cipherbox`" in summary for _, _, summary, _ in mined(store, "fact"))
    RecollectionWriter(settings).lessons.refresh(store.conn, project, project)
    event = {"session_id": S2, "hook_event_name": "PreToolUse", "cwd": project, "tool_name": "Bash",
             "tool_input": {"command": "gh pr checks 131 --repo FSM1/cipher-box"}, "tool_use_id": "toolu_b"}
    assert run_hook("pretooluse.py", engram_home, event) == ""


def test_a_fix_that_ran_the_command_from_a_folder_of_the_project_says_which(engram_home: Path,
                                                                             projects_dir: Path) -> None:
    """cipher-box's readers: "what fixed it: `node -e "…`" left out the `cd apps/api` that was the fix (`pg` is a
    dependency of the API package only)."""
    script = 'node -e "\nconst { Client } = require(\'pg\');\nnew Client().connect();\n"'
    c = Conversation(S1, cwd=CWD)
    c.user("Check the users table on the dev database")
    c.bash(script, "Error: Cannot find module 'pg'\nRequire stack:\n- /work/shop/[eval]", error=True)
    c.bash(f"cd {CWD}/apps/api && {script}", "connected")
    c.say("Connected.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    told = after(engram_home, S2, script, "Error: Cannot find module 'pg'\nRequire stack:\n- /work/shop/[eval]")
    assert "what fixed it: `cd apps/api && node -e" in told, told
    # Run from another checkout: the fix is told with a word that the call ran there, whose own set-up may differ.
    sibling = after(engram_home, S3, f"cd /work/shop-legacy && {script}",
                    "Error: Cannot find module 'pg'\nRequire stack:\n- /work/shop-legacy/[eval]")
    assert "That call ran in `/work/shop-legacy`, outside this project's folder: it may need that folder's own " \
        "set-up." in sibling, sibling


JEST_RAN_NONE = ("> @cipherbox/api@0.8.0 test /Users/michael/Code/cipher-box/apps/api\n"
                 "> jest --passWithNoTests -- --testPathPattern=auth.service.spec --no-coverage\n\n"
                 "No tests found, exiting with code 0\n")  # cipher-box's, as the session saw it (exit 0)


def jest_session(session: str, start: str) -> Conversation:
    c = Conversation(session, cwd=CWD, start=start)
    c.user("Run the auth service spec")
    c.bash("pnpm --filter api test -- --testPathPattern='auth.service.spec' --no-coverage 2>&1 | tail -60",
           JEST_RAN_NONE)
    c.bash("pnpm --filter api exec jest --testPathPattern='auth.service.spec' --no-coverage 2>&1 | tail -80",
           "PASS src/auth/auth.service.spec.ts\nTests: 12 passed, 12 total")
    c.say("Passing.", end_turn=True)
    return c


def test_a_test_run_that_ran_nothing_teaches_the_call_that_runs_the_tests_told_before_a_run_asked_the_same_way(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box met "No tests found, exiting with code 0" (jest's --passWithNoTests, exit 0) in four sessions and
    each time found `pnpm --filter api exec jest` runs the spec: learned, and told before the next run that passes
    `--testPathPattern` — from the session after the first (the call exits 0: no failure hook sees it fail), not
    before `pnpm --filter @cipherbox/crypto test`, a run of other tests."""
    write_conversations(projects_dir, jest_session(S1, "2026-11-01T10:00:00"))
    store = process()
    [(fix_id, kind, summary, status)] = mined(store, "error_fix")
    assert (kind, status) == ("gotcha", "active") and "No tests found" in summary, summary
    assert "pnpm --filter api exec jest" in summary
    assert before(engram_home, S3, "Bash", {"command": "pnpm --filter @cipherbox/crypto test 2>&1 | tail -30"}) == ""
    told = before(engram_home, S3, "Bash", {"command": "pnpm --filter api test -- --testPathPattern=jwt-issuer"})
    assert fix_id in told and "pnpm --filter api exec jest" in told, told


def test_a_go_that_ran_clean_and_was_tried_again_at_once_is_not_the_fix(engram_home: Path,
                                                                       projects_dir: Path) -> None:
    """cipher-box's `pnpm … exec jest --config apps/api/jest.config.js … | tail -30` printed "Error: Can't find a
    root directory" (the pipe hid its status) and the session ran `cd apps/api && npx jest …` right after: the fix
    told was the first, which fails. What the session went on to, right after a clean go, is what it settled on."""
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Run the email OTP spec")
    c.bash("pnpm --filter @cipherbox/api test -- --testPathPattern=email-otp 2>&1 | tail -20", JEST_RAN_NONE)
    c.bash("pnpm --filter @cipherbox/api exec jest --config apps/api/jest.config.js --testPathPattern=email-otp 2>&1 "
           "| tail -30", "Error: Can't find a root directory while resolving a config file path.\nProvided path to "
           "resolve: apps/api/jest.config.js")
    c.bash("cd apps/api && npx jest --testPathPattern=email-otp 2>&1 | tail -30", "Tests: 9 passed, 9 total")
    c.say("All 9 pass.", end_turn=True)
    # Not past a go that began with a `cd`: the shell stayed in `apps/api` for the goes after it (cipher-box's
    # `node -e` with `pg`, which only `apps/api` has).
    node = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    node.user("Delete the test user's vault")
    script = "node -e \"\nconst { Client } = require('pg');\nnew Client({user: '%s'}).connect()\n\""  # its lines
    node.bash(script % "cipherbox", "Error: Cannot find module 'pg'\nRequire stack:\n- /work/shop/[eval]", error=True)
    node.bash("cd apps/api && " + script % "cipherbox", "password authentication failed for user \"cipherbox\"")
    for _ in range(2):
        node.bash(script % "postgres", "Deleted 1 vault(s)")
    node.say("Deleted.", end_turn=True)
    write_conversations(projects_dir, c, node)
    summaries = sorted(m[2] for m in mined(process(), "error_fix"))
    assert "What fixed it: `cd apps/api && npx jest --testPathPattern=email-otp" in summaries[1], summaries
    assert "What fixed it: `cd apps/api && node -e" in summaries[0], summaries


def test_the_failed_command_running_clean_later_in_the_round_is_not_fixed_by_another_way_of_running_it(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's `pytest specs/ --spec` collected 0 items; an explicit spec file ran, then `pytest.ini` was
    written and `pytest specs/ --spec` itself ran clean. The lesson told two months later was "what fixed it:
    `pytest specs/apple_books/library_spec.py --spec`" before a bare `pytest` that collected its specs: stale
    from the moment it was learned. The failed command running clean later is what got past it."""
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Run the specs")
    c.bash("source venv/bin/activate && pytest specs/ --spec", "collected 0 items\n\n=== no tests ran in 0.01s ===",
           error=True)
    c.bash("source venv/bin/activate && pytest specs/apple_books/library_spec.py --spec", "4 passed in 0.02s")
    c.write(f"{CWD}/pytest.ini", "[pytest]\npython_files = *_spec.py")
    c.bash("source venv/bin/activate && pytest specs/ --spec", "4 passed in 0.02s")
    c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    assert not [m for m in mined(store, "error_fix") if "library_spec.py" in m[2]], mined(store, "error_fix")
    assert "library_spec" not in before(engram_home, S2, "Bash", {"command": "pytest specs/ --spec"})


COLLECTED_NOTHING = ("Error: ============================= test session starts ==============================\n"
                     "platform darwin -- Python 3.13.0, pytest-8.3.5, pluggy-1.5.0\nrootdir: /work/shop\n"
                     "plugins: describe-2.2.0, spec-4.0.0, cov-6.1.1\ncollected 0 items\n\n"
                     "============================ no tests ran in 0.01s =============================")


def test_a_failure_that_came_back_in_a_later_round_is_taught_by_what_got_past_it_then(engram_home: Path,
                                                                                       projects_dir: Path) -> None:
    """BookMinder's "can you run the specs?": `pytest specs/ --spec` collected 0 items and one spec file run by
    name ran. The next prompt ("I had trouble getting the living documentation output. Can we fix it?") met the
    same "collected 0 items" four times until `pytest.ini` said where the specs are, and `pytest --spec` ran
    them all. The lesson kept the first round's way round it (run one file by name) and was told before `pytest`
    weeks later. What got past it the last time is the lesson; being a change to the project's files, it is told
    right after the same failure, never before the command (the file is there now)."""
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("can you run the specs?")
    c.bash(f"cd {CWD} && pytest specs/ --spec", "Error: (eval):1: command not found: pytest", error=True)
    c.bash(f"cd {CWD} && source venv/bin/activate && pytest specs/ --spec", COLLECTED_NOTHING, error=True)
    c.bash(f"cd {CWD} && source venv/bin/activate && pytest specs/apple_books/library_spec.py --spec",
           "collected 4 items\n\n    ✓ It lists books\n\n4 passed in 0.02s")
    c.say("All 4 specs pass.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    first_round = [summary for _, _, summary, _ in mined(store, "error_fix") if "collected 0 items" in summary]
    assert ["library_spec.py" in summary for summary in first_round] == [True], first_round  # stored meanwhile
    assert ["library_spec.py" in summary for _, _, summary, _ in mined(store, "recipe")] == [True]
    c.user("I had trouble getting the living documentation output. It looks like you had the same issue. Can we "
           "fix it?")
    c.bash(f"cd {CWD} && ls -la specs/", "apple_books")
    c.bash(f"cd {CWD} && source venv/bin/activate && pytest specs/ --spec", COLLECTED_NOTHING, error=True)
    c.bash(f"cd {CWD} && source venv/bin/activate && python -m pytest specs/apple_books/library_spec.py --spec -v",
           "collected 4 items\n\n4 passed in 0.02s")
    c.bash(f"cd {CWD} && source venv/bin/activate && python -m pytest specs/ --spec", COLLECTED_NOTHING, error=True)
    c.bash(f"cd {CWD} && source venv/bin/activate && PYTHONPATH=. pytest specs/apple_books/library_spec.py -v",
           "collected 4 items\n\n4 passed in 0.02s")  # another command got past it another way: not settled yet
    c.write(f"{CWD}/conftest.py", "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))")
    c.bash(f"cd {CWD} && source venv/bin/activate && pytest specs/ --spec", COLLECTED_NOTHING, error=True)
    c.write(f"{CWD}/pytest.ini", "[pytest]\ntestpaths = specs\npython_files = *_spec.py")
    c.bash(f"cd {CWD} && source venv/bin/activate && pytest --spec", "configfile: pytest.ini\n4 passed in 0.02s")
    c.say("Fixed: pytest.ini tells pytest where the specs are.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    lessons = [summary for _, _, summary, status in mined(store, "error_fix") if "collected 0 items" in summary]
    assert [status for _, _, _, status in mined(store, "recipe")] == ["stale"]  # its way round it was not the way
    assert lessons == ["`source venv/bin/activate && pytest specs/ --spec` failed: collected 0 items What fixed it: "
                       "changing `pytest.ini`, then `source venv/bin/activate && pytest --spec`."], lessons
    told = after(engram_home, S2, "source venv/bin/activate && pytest specs/ --spec", COLLECTED_NOTHING)
    assert "changing `pytest.ini`" in told and "library_spec" not in told, told
    # Met again in a second session: a way of running things would now be told before the command; a change
    # to the project's files is not.
    again = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    again.user("run the specs")
    again.bash("source venv/bin/activate && pytest specs/ --spec", COLLECTED_NOTHING, error=True)
    again.write(f"{CWD}/pytest.ini", "[pytest]\ntestpaths = specs\npython_files = *_spec.py")
    again.bash("source venv/bin/activate && pytest --spec", "4 passed in 0.02s")
    again.say("Done.", end_turn=True)
    write_conversations(projects_dir, c, again)
    store = process()
    RecollectionWriter(load_settings()).write(store, S3, "u-s3", "Run the specs", project=CWD)
    asked_again = {"command": "source venv/bin/activate && pytest specs/ --spec"}
    assert "pytest.ini" not in before(engram_home, S3, "Bash", asked_again)


@pytest.mark.parametrize(("ran", "told"), [
    ("source .venv/bin/activate && python -m pytest specs/ --cov", True),  # BookMinder's own call
    ("source .venv/bin/activate && ruff check .", False),  # pytest never ran in that environment
    ("pytest specs/", False),  # nor after it
])
def test_a_program_not_found_is_told_the_fix_that_found_another_in_the_environment_both_ran_in(
        engram_home: Path, projects_dir: Path, ran: str, told: bool) -> None:
    """BookMinder learned what found one program (`pre-commit`: `source .venv/bin/activate && …`), ran `python -m
    pytest` in that environment, and four days later met "(eval):1: command not found: pytest" with nothing told:
    the answer was filed under the other program (here `python`'s). The programs a project ran clean after the
    fix's activation are answered by it; no other."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("List my books")
    first.bash("python bookminder/cli.py list", "Error: (eval):1: command not found: python", error=True)
    first.bash("source .venv/bin/activate && python bookminder/cli.py list", "Dune")
    first.say("One book.", end_turn=True)
    second = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    second.user("Check again")
    second.bash(ran, "12 passed")
    second.say("Done.", end_turn=True)
    write_conversations(projects_dir, first, second)
    store = process()
    [(fix_id, _, _, _)] = mined(store, "error_fix")
    shown = after(engram_home, S3, "pytest specs/ --spec", "Error: (eval):1: command not found: pytest")
    assert (fix_id in shown) is told, shown
    # BookMinder's other way of meeting it: the system python3 has no pytest.
    module = after(engram_home, S5, "python3 -m pytest specs/", "/opt/homebrew/bin/python3: No module named pytest")
    assert (fix_id in module) is told, module
    if told:
        assert "`python` was not found the same way on 2026-11-01; what fixed it: `source .venv/bin/activate" in shown
    # Its own failure (another session: a memory is told once a session) still reads as its own; a program the
    # environment never ran is told nothing.
    own = after(engram_home, S4, "python x.py", "(eval):1: command not found: python")
    assert "- This failed the same way on" in own
    assert after(engram_home, S3, "gh pr view", "(eval):1: command not found: gh") == ""


def test_a_program_not_found_whose_message_was_thrown_away_is_told_what_found_it(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box ran `PGPASSWORD=… psql -h … 2>/dev/null` and got nothing but "Exit code 127": no signature, so
    nothing was told, though an earlier session met "(eval):1: command not found: psql". Status 127 is the shell's
    "command not found"; the same program not found is the same failure whichever shell said it."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Check the test user in the database")
    first.bash("psql -h localhost -U cipherbox -d cipherbox -c 'SELECT 1'",
               "Exit code 127\n(eval):1: command not found: psql", error=True)
    first.bash("export PATH=/opt/homebrew/opt/libpq/bin:$PATH && psql -h localhost -U cipherbox -d cipherbox "
               "-c 'SELECT 1'", " ?column? \n----------\n        1\n(1 row)")
    first.say("The user exists.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(fix_id, _, _, _)] = mined(store, "error_fix")
    hidden = after(engram_home, S2, "PGPASSWORD=postgres psql -h db -U postgres -d cipherbox -c 'SELECT 3' "
                                    "2>/dev/null", "Exit code 127")
    assert fix_id in hidden and "libpq/bin" in hidden, hidden
    bash = after(engram_home, S3, "psql -c 'SELECT 4'", "bash: line 1: psql: command not found")
    assert fix_id in bash, bash
    # Another program's 127, or a 127 that said what it was, is not psql's.
    assert after(engram_home, S4, "docker exec db psql 2>/dev/null", "Exit code 127") == ""
    assert after(engram_home, S5, "psql -f x.sql | grep ok", "Exit code 127\ngrep: x: No such file or directory") == ""


def test_a_program_the_project_always_ran_inside_its_environment_is_told_so_when_it_is_not_found(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's first session ran every `pytest` after `source venv/bin/activate`; the second ran `pytest
    specs/ --spec` bare, met "(eval):1: command not found: pytest" and was told nothing: nothing had failed before.
    How the project always ran its tools is the lesson, told right after one of them is not found; a program
    the project later ran bare is not told any more."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Set up the project and run the specs")
    first.bash("python3 -m venv venv && source venv/bin/activate && python --version", "Python 3.13.0")
    for package in ("-r requirements.txt", "-e .", "pre-commit"):
        first.bash(f"source venv/bin/activate && pip install {package}", "Successfully installed")
    for spec in ("library", "reader", "cli"):
        first.bash(f"source venv/bin/activate && cd {CWD} && pytest specs/apple_books/{spec}_spec.py --spec",
                   "3 passed")
    first.bash("source venv/bin/activate && python -m pytest --spec", "9 passed")
    first.bash("source venv/bin/activate && python -m pytest -q", "9 passed")
    first.bash("uv --version", "uv 0.7.2")
    first.say("All specs pass.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(memory_id, kind, summary, _)] = mined(store, "environment")
    assert kind == "gotcha" and "Here `pytest`, `pip` and `python` ran inside the environment `source venv/bin/" \
        "activate` sets up" in summary, summary
    told = after(engram_home, S2, f"cd {CWD} && pytest specs/ --spec", "Error: (eval):1: command not found: pytest")
    assert memory_id in told and "`source venv/bin/activate && pytest …`" in told, told
    assert memory_id in after(engram_home, S3, "python3 -m pytest specs", "/opt/homebrew/bin/python3: No module "
                                                                           "named pytest")
    assert after(engram_home, S4, "uv sync", "zsh:1: command not found: uv") == ""  # it ran outside the venv
    # In a sibling checkout (BookMinder's `cd …/BookMind && python -m pytest`, 05-25): told, with a word that the
    # call ran in another folder, whose own set-up may differ (both labellers: the moment needed the virtualenv;
    # without this line the session concluded the sibling's tests were broken until the user said to activate it).
    sibling = after(engram_home, S4, "cd /work/shop-legacy && pytest specs/ --spec",
                    "Error: (eval):1: command not found: pytest")
    assert memory_id in sibling and "That call ran in `/work/shop-legacy`, outside this project's folder: it may " \
        "need that folder's own set-up." in sibling, sibling
    # A run outside it that failed for want of something (BookMinder's `pip3 install --user pre-commit`): told;
    # one that ran and failed on its own (a test failed), or one inside the environment: not.
    managed = after(engram_home, S5, "pip3 install --user pre-commit",
                    "Error: [notice] A new release of pip is available: 24.2 -> 25.1.1\nerror: externally-managed-"
                    "environment\n\n× This environment is externally managed")
    assert memory_id in managed, managed
    assert after(engram_home, S4, "pytest specs/", "FAILED specs/cli_spec.py::test_list - assert 2 == 3") == ""
    assert after(engram_home, S4, "source venv/bin/activate && python -m pytest",
                 "ModuleNotFoundError: No module named 'ebooklib'") == ""
    # A later session runs `pytest` bare and clean (the project's shell has the environment now): not told again.
    later = Conversation(S5, cwd=CWD, start="2026-11-03T10:00:00")
    later.user("Run the specs")
    later.bash("pytest --spec", "9 passed")
    later.say("Done.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    assert [(k, st) for _, k, _, st in mined(store, "environment")] == [("gotcha", "superseded"), ("gotcha", "active")]
    assert after(engram_home, S4, "pytest specs/", "Error: (eval):1: command not found: pytest") == ""


def test_a_python_not_found_is_told_the_virtualenv_the_project_runs_its_tools_in(engram_home: Path,
                                                                                 projects_dir: Path) -> None:
    """BookMinder 05-25: the project's sessions had run `pytest`, `pip` and `pre-commit` after `source
    .venv/bin/activate`, never `python` (`python3` ran bare, the system's); `cd … && python -m pytest
    --cov` met "(eval):1: command not found: python" and was told nothing. A virtualenv has its own `python`:
    the environment is told after it too, and not after a program the environment does not have."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Move to uv and run the specs")
    first.bash("uv venv && source .venv/bin/activate && pip install -e .", "Successfully installed")
    for command in ("pytest specs/ --spec", "pip install pre-commit", "pre-commit install", "pytest -q",
                    "pre-commit run --all-files", "pip list", "pytest --spec"):
        first.bash(f"source .venv/bin/activate && {command}", "ok")
    first.bash("python3 --version", "Python 3.13.3")
    first.say("Done.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(memory_id, _, summary, _)] = mined(store, "environment")
    assert "`python`" not in summary, summary  # it says what ran there
    told = after(engram_home, S2, f"cd {CWD} && python -m pytest --cov=bookminder",
                 "Error: (eval):1: command not found: python")
    assert memory_id in told and "Here `pip` and `pytest` ran inside the environment `source .venv/bin/activate`" \
        in told, told
    assert after(engram_home, S3, "node --version", "Error: (eval):1: command not found: node") == ""


def test_a_program_not_found_is_told_one_environment_the_one_the_project_moved_to(engram_home: Path,
                                                                                  projects_dir: Path) -> None:
    """BookMinder 05-21: "(eval):1: command not found: python" was told, in one answer, the fix of 05-04
    (`source venv/bin/activate && python -m pytest --spec`) and the environment the project had moved its tools
    to since: two environments, one of them gone (read: noise). The environment the project's tools run in now
    is told, not an older fix that activates another."""
    old = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    old.user("Run the specs")
    old.bash("python -m pytest --spec", "Error: (eval):1: command not found: python", error=True)
    old.bash("source venv/bin/activate && python -m pytest --spec", "4 passed")
    old.say("They pass.", end_turn=True)
    moved = Conversation(S2, cwd=CWD, start="2026-11-05T10:00:00")
    moved.user("Move to uv")
    moved.bash("uv venv && source .venv/bin/activate && pip install -e .", "Installed")
    for command in ("python -m pytest --spec", "pip list", "python -m pytest -q", "pip check", "pytest --spec"):
        moved.bash(f"source .venv/bin/activate && {command}", "ok")
    moved.say("Moved.", end_turn=True)
    write_conversations(projects_dir, old, moved)
    process()
    told = after(engram_home, S3, "python -m pytest specs", "Error: (eval):1: command not found: python")
    assert "ran inside the environment `source .venv/bin/activate`" in told, told
    assert "source venv/bin/activate" not in told, told


def test_a_step_the_project_runs_inside_its_environment_is_said_with_its_set_up(engram_home: Path,
                                                                                 projects_dir: Path) -> None:
    """BookMinder: its commit hook's lesson said "run `pre-commit run --all-files` and stage what it changes", and
    `pre-commit` runs only inside `.venv` there (both readers: the advice fails outside it; a session that ran it
    so failed). A step that runs one of the environment's programs bare is said with the set-up; not another
    program's, and not twice."""
    tools = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    tools.user("Set up the hooks")
    for command in ("pip install pre-commit", "pre-commit install", "pre-commit run --all-files", "pip list",
                    "pre-commit autoupdate", "pip check"):
        tools.bash(f"source .venv/bin/activate && {command}", "ok")
    tools.say("Hooks set.", end_turn=True)
    write_conversations(projects_dir, tools, commit_session(S2, "2026-11-02T10:00:00", PRE_COMMIT),
                        commit_session(S3, "2026-11-03T10:00:00", PRE_COMMIT))
    process()
    told = after(engram_home, S4, 'git commit -m "X"', PRE_COMMIT)
    assert "run `source .venv/bin/activate && pre-commit run --all-files` and stage what it changes" in told, told
    assert told.count("source .venv/bin/activate") == 1, told


def test_a_tool_run_bare_is_told_the_environment_before_it_fails(engram_home: Path, projects_dir: Path) -> None:
    """BookMinder: every session's first `pytest specs/ --spec` (or `pre-commit install`) ran bare, failed "command
    not found", and was told the environment right after; both readers: related — the agent's very next call was
    the same one after the activation. Each shell call starts afresh, so a bare run of a program the project runs
    only inside its environment fails: told before it, the failure does not happen. Not a run after the set-up,
    through a runner, by its path, in another project's folder, a bare interpreter, a program the environment does
    not hold, an install into the user's own site (`pip3 install --user pre-commit`, on purpose outside any
    environment: both readers, related), or where the environment is active already (Claude Code started from a
    shell that activated it); once a session."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Set up the project and run the specs")
    first.bash("python3 -m venv .venv && source .venv/bin/activate && pip install -e .", "Successfully installed")
    for command in ("pytest specs/ --spec", "pip install pre-commit", "pytest -q", "pip list", "pytest --spec"):
        first.bash(f"source .venv/bin/activate && {command}", "ok")
    first.bash("git status", "On branch main")
    first.say("All specs pass.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(memory_id, _, _, _)] = mined(store, "environment")
    told = before(engram_home, S2, "Bash", {"command": f"cd {CWD} && pytest specs/ --spec"})
    assert memory_id in told and "Here `pip` and `pytest` ran inside the environment `source .venv/bin/activate`" \
        in told, told
    assert before(engram_home, S2, "Bash", {"command": "pytest -q"}) == ""  # once a session
    assert memory_id in before(engram_home, S3, "Bash", {"command": "python3 -m pytest specs"})
    for command in ("source .venv/bin/activate && pytest -q", "uv run pytest", ".venv/bin/pytest -q",
                    "pip3 install --user pre-commit", "python3 -m pip install --user pre-commit",
                    "cd /work/other-checkout && pytest", "python3 scripts/build.py", "git status", "uv --version"):
        assert before(engram_home, S5, "Bash", {"command": command}) == "", command
    # Claude Code started from a shell that activated it: its hooks and its shell calls have the environment.
    event = {"session_id": S5, "hook_event_name": "PreToolUse", "cwd": CWD, "tool_name": "Bash",
             "tool_input": {"command": "pytest -q"}, "tool_use_id": "toolu_b"}
    assert run_hook("pretooluse.py", engram_home, event, {"VIRTUAL_ENV": f"{CWD}/.venv"}) == ""
    assert run_hook("pretooluse.py", engram_home, event, {"PATH": f"{CWD}/.venv/bin:/usr/bin:/bin"}) == ""
    assert memory_id in run_hook("pretooluse.py", engram_home, event, {"VIRTUAL_ENV": "/work/other/.venv"})


def test_the_environment_a_project_moved_its_tools_to_is_the_one_told_and_a_sibling_projects_is_not(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder ran its tools in `venv/` for weeks, then moved to uv's `.venv/`; a session later ran
    `cd …/BookMind && source venv/bin/activate && python -m pytest` in the sibling project. At the next "command not
    found: pytest" the memory said `source venv/bin/activate` — a folder removed a week earlier (both readers:
    noise). The environment is the newest the project's own commands ran in, with the runs in the one it replaced
    counted; a command that went to another project's folder first is that project's. Sessions captured out of
    order (a backfill takes transcripts as the folder lists them) are read by when they ran."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Run the specs")
    for spec in ("library", "reader", "cli"):
        first.bash(f"source venv/bin/activate && pytest specs/{spec}_spec.py", "3 passed")
        first.bash("source venv/bin/activate && pre-commit run --all-files", "ruff.....Passed")
    first.say("Green.", end_turn=True)
    moved = Conversation(S2, cwd=CWD, start="2026-11-10T10:00:00")
    moved.user("Let's switch to uv")
    moved.bash(f"cd {CWD} && rm -rf venv && uv venv", "Creating virtual environment at: .venv")
    moved.bash("source .venv/bin/activate && uv pip install -e '.[dev]'", "Installed 14 packages in 40ms")
    moved.bash("source .venv/bin/activate && ruff check .", "All checks passed!")
    moved.say("Switched.", end_turn=True)
    sibling = Conversation(S3, cwd=CWD, start="2026-11-12T10:00:00")
    sibling.user("How did the first attempt, BookMind, run its specs?")
    for flag in ("-v", "--spec", "-q"):
        sibling.bash(f"cd /work/shop-old && source venv/bin/activate && python -m pytest {flag}", "5 passed")
    sibling.say("With plain pytest.", end_turn=True)
    write_conversations(projects_dir, sibling, moved, first)  # listed in no particular order
    store = process()
    [(memory_id, _, summary, _)] = [m for m in mined(store, "environment") if m[3] == "active"]
    assert "`source .venv/bin/activate`" in summary and "`pytest`" in summary, summary
    told = after(engram_home, S4, "pytest specs/ --spec", "Error: (eval):1: command not found: pytest")
    assert memory_id in told and "`source .venv/bin/activate && " in told and "venv/bin" not in told.replace(
        ".venv/bin", ""), told
    # A commit whose pre-commit hook did not find pre-commit (its hook script's own words): that program not found.
    hook = after(engram_home, S5, "git commit -m 'Ignore uv environments'",
                 "Error: `pre-commit` not found.  Did you forget to activate your virtualenv?")
    assert memory_id in hook, hook


def test_a_set_up_whose_folder_a_later_command_removed_is_not_where_the_tools_run() -> None:
    """BookMinder's session 5 ran its tools in `.uvenv/`, the next removed it (`rm -rf .uvenv`, as typed) and
    committed; its pre-commit hook met "`pre-commit` not found" and the memory said `source .uvenv/bin/activate`,
    five minutes after that folder went. The set-up is the newest one whose folder is still there."""
    root = "cd /Users/palimondo/Developer/BookMinder && "
    newest_first = ["rm -rf .uvenv", "rm -rf venv",
                    *[root + f"source .uvenv/bin/activate && {run}" for run in ("pytest", "ruff --version")],
                    *[root + f"source .venv/bin/activate && pytest specs/{s}_spec.py" for s in ("a", "b", "c")]]
    found = run_inside(newest_first)
    assert found is not None and found.activation == "source .venv/bin/activate" and "pytest" in found.programs
    assert run_inside(newest_first[1:]).activation == "source .uvenv/bin/activate"  # before its removal: there


def test_a_recipe_whose_way_through_dropped_options_is_told_before_a_call_given_them_only(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's session 3 got `uv venv` right by dropping options (`-p .uvenv`, then `--path .uvenv`, then `uv
    venv .uvenv`, each error as uv wrote it); the recipe was told before a later `uv venv && source .venv/bin/
    activate && …` that gave none of them (both readers: noise)."""
    path = 'export PATH="$HOME/.local/bin:$PATH" && '
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Make a separate environment for uv")
    c.bash("uv venv -p .uvenv", "Exit code 127\n(eval):1: command not found: uv", error=True)
    c.bash(path + f"cd {CWD} && uv venv -p .uvenv", "× No interpreter found for executable name `.uvenv` in "
                                                   "managed installations or search path", error=True)
    c.bash(path + "uv venv --path .uvenv", "error: unexpected argument '--path' found\n\n  tip: to pass '--path' "
                                           "as a value, use '-- --path'\n\nUsage: uv venv [OPTIONS] [PATH]",
           error=True)
    c.bash(path + "uv venv .uvenv", "Using CPython 3.13.3\nCreating virtual environment at: .uvenv")
    c.say("Made.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(recipe_id, _, summary, _)] = mined(store, "recipe")
    assert summary.startswith("To run `uv venv` here:"), summary
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Set up the project", project=CWD)
    # As BookMinder's session 5 typed it: `mkdir`'s `-p` is not `uv venv`'s.
    assert before(engram_home, S2, "Bash", {"command": "mkdir -p ~/t && cd ~/t && uv venv && source .venv/bin/"
                                                       "activate"}) == ""
    assert recipe_id in before(engram_home, S3, "Bash", {"command": "uv venv --path .venv"})  # the way it failed
    # uv not found was got past by the `export PATH=…` step; the command it went with failed another way (both
    # readers: "it quotes a 'fix' command that actually failed"): the step is the fix, said without the other
    # failure (round ten's reader: "the closing clause only confuses").
    told = after(engram_home, S4, "uv --version", "(eval):1: command not found: uv")
    assert 'what fixed it: `export PATH="$HOME/.local/bin:$PATH"` first.' in told, told


def test_a_program_not_found_is_told_after_it_fails_never_before_and_goes_once_it_runs_by_its_name(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's uv lived in `~/.local/bin`, off the agent's PATH, in two sessions; the user then put it on the
    PATH, and the next session's first `uv venv` call was told "`uv venv -p .uvenv` failed: command not found: uv
    What fixed it: `export PATH=…`" before it (both readers: noise: uv was found). Whether a shell has a program is
    known when it fails, so that fix is told after the failure only; and once any command runs the program by its
    name clean (`mkdir -p t && cd t && uv venv`), it is retired — not by a clean run after an HTTP "Not Found" of
    the same program (`gh: Not Found (HTTP 404)` is not gh missing)."""
    sessions = []
    for index, day in enumerate(("01", "02")):
        c = Conversation(S1 if index == 0 else S2, cwd=CWD, start=f"2026-11-{day}T10:00:00")
        c.user("Make the environment")
        c.bash("uv venv -p .uvenv", "Exit code 127\n(eval):1: command not found: uv", error=True)
        c.bash('export PATH="$HOME/.local/bin:$PATH" && uv venv -p .uvenv', "Creating virtual environment at: .uvenv")
        c.bash("gh api repos/o/r/pulls/1/comments/9", "gh: Not Found (HTTP 404)", error=True)
        c.bash("gh api repos/o/r/pulls/comments/9", '{"body": "nit"}')
        c.say("Made.", end_turn=True)
        sessions.append(c)
    write_conversations(projects_dir, *sessions)
    store = process()
    fixes = {summary.split("`")[1]: (fix_id, status) for fix_id, _, summary, status in mined(store, "error_fix")}
    uv_fix, _ = fixes["uv venv -p .uvenv"]
    RecollectionWriter(load_settings()).write(store, S3, "u-s3", "Make the environment", project=CWD)
    assert before(engram_home, S3, "Bash", {"command": "uv venv -p .uvenv"}) == ""
    assert uv_fix in after(engram_home, S3, "uv venv -p .uvenv", "(eval):1: command not found: uv")
    later = Conversation(S4, cwd=CWD, start="2026-11-05T10:00:00")
    later.user("Try uv in a scratch folder")
    later.bash("mkdir -p t && cd t && uv venv", "Creating virtual environment at: .venv")
    later.bash("gh pr list", "#1  Fix the cart  feat/cart")
    later.say("uv works.", end_turn=True)
    write_conversations(projects_dir, *sessions, later)
    store = process()
    status = {summary.split("`")[1]: st for _, _, summary, st in mined(store, "error_fix")}
    assert status == {"uv venv -p .uvenv": "stale", "gh api repos/o/r/pulls/1/comments/9": "active"}, status


def test_a_program_never_installed_where_the_project_runs_is_told_with_what_did_its_job(engram_home: Path,
                                                                                       projects_dir: Path) -> None:
    """cipher-box's sessions reached for `psql` (and `docker`) where neither is installed: "(eval):1: command not
    found: psql", or only "Exit code 127" when its message went to /dev/null. The session got the rows with the
    project's own `pg` client from `apps/api`; the next sessions met "command not found: psql" again and were told
    nothing. A program met not found that no session here ran is told right after it is not found again, with the
    call that did its job; never a program found after an activation or an `export PATH=`, never one run only on
    another machine (`ssh host "docker ps"`) or where a pipe hid its failure, and not once it runs clean here."""
    query = "SELECT ipns_name, latest_cid FROM folder_ipns LIMIT 10;"
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Check the DB for cached IPNS CIDs")
    first.bash(f'PGPASSWORD=postgres psql -h 192.168.133.114 -U postgres -d cipherbox -c "{query}" 2>/dev/null',
               "Exit code 127", error=True)
    first.bash("which psql 2>&1", "psql not found", error=True)
    first.bash("curl -s -X POST http://localhost:3001/reset", "ok")
    first.bash(f"cd {CWD}/apps/api && node -e \"\nconst {{ Client }} = require('pg');\nconst c = new Client("
               "{host:'192.168.133.114',user:'cipherbox',database:'cipherbox'});\n"
               f"c.connect().then(() => c.query('{query}')).catch(e => console.log(e.message))\n\"",
               'password authentication failed for user "cipherbox"')  # exited 0: the next go is the way
    first.bash(f"node -e \"\nconst {{ Client }} = require('pg');\nconst c = new Client("  # still in apps/api
               "{host:'192.168.133.114',user:'postgres',password:'postgres',database:'cipherbox'});\n"
               f"c.connect().then(() => c.query('{query}')).then(r => console.log(r.rows))\n\"",
               "[ { ipns_name: 'k51qzi5uqu5d', latest_cid: 'bafy' } ]")
    first.bash("docker ps --format '{{.Names}}' 2>/dev/null | grep -i ipfs || echo 'No IPFS container running'",
               "No IPFS container running")
    first.bash('ssh root@76.13.151.200 "cd /opt/cipherbox/docker && docker compose ps postgres"', "postgres Up")
    first.bash("docker compose up -d", "Exit code 127\n(eval):1: command not found: docker", error=True)
    first.bash("uv sync", "Exit code 127\n(eval):1: command not found: uv", error=True)
    first.bash('export PATH="$HOME/.local/bin:$PATH" && uv sync', "Resolved 12 packages")
    first.bash("jest ipns.service", "Exit code 127\n(eval):1: command not found: jest", error=True)
    first.bash("pnpm --filter api exec jest ipns.service", "Tests: 12 passed")  # the project has it, in its packages
    first.say("The table has one cached CID.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    found = {summary.split("`")[1]: (memory_id, summary) for memory_id, _, summary, status in mined(store, "absent")
             if status == "active"}
    # `uv` ran once PATH had it, `jest` through pnpm; `docker` never ran here
    assert sorted(found) == ["docker", "psql"], found
    psql_id, psql = found["psql"]
    assert psql.startswith("`psql` is not on the PATH of this project's sessions: not found on 2026-11-01, never "
                           "run here by that name. What did its job instead: `cd apps/api && node -e"), psql
    assert "user:'postgres'" in psql and "192.168.133.114" in psql, psql  # the go the session settled on
    assert "password:'postgres'" not in psql, psql  # redacted like everything
    told = after(engram_home, S2, 'psql -h localhost -U cipherbox -d cipherbox -c "SELECT 1"',
                 "Exit code 127\n(eval):1: command not found: psql")
    assert psql_id in told and "require('pg')" in told, told
    assert found["docker"][0] in after(engram_home, S2, "docker compose logs api", "zsh:1: command not found: docker")
    uv = after(engram_home, S3, "uv sync", "zsh:1: command not found: uv")  # its fix is told, not "not on the PATH"
    assert "export PATH=" in uv and "not on the PATH" not in uv, uv
    assert after(engram_home, S3, "psql -h localhost", "psql: error: connection refused") == ""  # it ran: not this
    # A later session has psql: it ran clean here, so what was said of it is retired.
    later = Conversation(S4, cwd=CWD, start="2026-11-03T10:00:00")
    later.user("Count the users")
    later.bash('psql -h 192.168.133.114 -U postgres -d cipherbox -c "SELECT count(*) FROM users"', " count\n 3")
    later.say("Three users.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    statuses = {summary.split("`")[1]: status for _, _, summary, status in mined(store, "absent")}
    assert statuses == {"psql": "stale", "docker": "active"}, statuses
    assert after(engram_home, S5, "psql -c 'SELECT 1'", "zsh:1: command not found: psql") == ""


def queued(c: Conversation, *typed: str) -> None:
    """What the user typed while the agent went on, handed to it with the next tool result (Claude Code's
    `queue-operation` lines, as cipher-box's 2095544c has them: each enqueued, then all removed at once)."""
    for text in typed:
        c.lines.append(json.dumps({"type": "queue-operation", "operation": "enqueue", "timestamp": c._stamp(),
                                   "sessionId": c.session_id, "content": text}) + "\n")
    stamp = c._stamp()
    c.lines += [json.dumps({"type": "queue-operation", "operation": "remove", "timestamp": stamp,
                            "sessionId": c.session_id}) + "\n"] * len(typed)


def test_a_program_the_user_said_is_not_here_is_told_before_a_call_that_runs_it(engram_home: Path,
                                                                                 projects_dir: Path) -> None:
    """cipher-box 02-13: `docker compose up -d` met "command not found: docker"; the agent went looking for Docker
    Desktop while the user typed "did we not go through this before, you dont have access to docker  here",
    "docker is running on your host.", "why do you need docker for the api logs?". The next sessions ran `docker
    exec … psql` and `docker ps` again, several calls each, and were told "`docker` is not on the PATH" only after
    (both readers: related — it restates the failure). What the user said of the program right after it was not
    found is kept with it (their statements naming it, not their questions), and then it is told before a call that
    runs it too; a program nobody said anything of is still told only after it is not found."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Get me a JWT from the local API")
    first.bash("docker compose up -d", "Exit code 127\n(eval):1: command not found: docker", error=True)
    first.bash("which docker 2>/dev/null || open -a Docker", "Docker app starting")
    queued(first, "did we not go through this before, you dont have access to docker  here",
           "docker is running on your host.", "why do you need docker for the api logs?")
    first.say("You're right, I don't need Docker for this.")
    first.bash('psql -h localhost -U cipherbox -c "SELECT 1"', "Exit code 127\n(eval):1: command not found: psql",
               error=True)
    first.say("Which host is the database on?", end_turn=True)
    first.user("check again on 192.168.133.114")
    first.bash("DB_HOST=192.168.133.114 REDIS_HOST=192.168.133.114 pnpm --filter api dev", "Nest application started")
    first.say("The API is up.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    found = {summary.split("`")[1]: (memory_id, summary) for memory_id, _, summary, status in mined(store, "absent")
             if status == "active"}
    docker_id, docker = found["docker"]
    assert docker == ("`docker` is not on the PATH of this project's sessions: not found on 2026-11-01, never run here "
                      "by that name. The user said then: “you dont have access to docker here” “docker is running on "
                      "your host.”"), docker
    told = before(engram_home, S2, "Bash", {"command": "docker exec -i postgres psql -U postgres -c 'SELECT 1'"})
    assert docker_id in told and "you dont have access to docker here" in told, told
    assert before(engram_home, S2, "Bash", {"command": "docker ps"}) == ""  # once a session
    assert before(engram_home, S3, "Bash", {"command": "which docker"}) == ""  # a call that looks for it runs none
    psql_id, psql = found["psql"]
    assert "The user said" not in psql, psql  # the next message named no program
    assert before(engram_home, S3, "Bash", {"command": "psql -h localhost -c 'SELECT 1'"}) == ""
    assert psql_id in after(engram_home, S3, "psql -h localhost", "zsh:1: command not found: psql")


PATHSPEC = ("Exit code 128\nwarning: could not open directory 'apps/web/apps/web/src/components/file-browser/': No "
            "such file or directory\nfatal: pathspec 'apps/web/src/components/file-browser/FileBrowser.tsx' did not "
            "match any files")  # cipher-box feecf209, as the session saw it


def test_a_call_run_in_a_folder_of_the_project_with_paths_from_its_root_is_told_where_it_ran(
        engram_home: Path, projects_dir: Path, tmp_path: Path) -> None:
    """cipher-box 02-13: `cd apps/web && npx vite build`, then `git add apps/web/src/components/file-browser/
    FileBrowser.tsx && git commit …` met "could not open directory 'apps/web/apps/web/src/…'": Claude Code's shell
    keeps the folder a `cd` left it in (its lines' `cwd` follows it). The agent looked at `git status` before
    going back; the same shape recurred in other projects (`uv run pytest test/…` run in `test/`). Right after such
    a failure: where the call ran, and how to run it — once a session; not for a call that went to a folder of its
    own first, one run at the project's folder, or a failure that is not a missing path."""
    process()  # the processor running: its folders made
    root = tmp_path / "cipher-box"
    (root / "apps" / "web").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    command = ("git add apps/web/src/components/file-browser/FileBrowser.tsx && git commit -m \"fix(12.2): mount "
               "useDeviceRegistrySync hook in FileBrowser\"")
    told = after(engram_home, S1, command, PATHSPEC, cwd=str(root / "apps" / "web"))
    assert told.count("This call ran in `apps/web`, a folder of the project, with a path from the project's folder "
                      "(`apps/web/…`): the shell keeps the folder an earlier `cd` left it in. Run it as "
                      f"`cd {root} && …`, or with paths from `apps/web`.") == 1, told
    assert after(engram_home, S1, command, PATHSPEC, cwd=str(root / "apps" / "web")) == ""  # once a session
    missing_test = "ERROR: file or directory not found: test/test_template_rendering.py\n\nno tests ran in 0.01s"
    (root / "test").mkdir()
    assert "This call ran in `test`" in after(engram_home, S2, "uv run pytest test/test_template_rendering.py -v",
                                              missing_test, cwd=str(root / "test"))
    for ran, cwd, error in ((command, str(root), PATHSPEC),
                            (f"cd {root} && {command}", str(root / "apps" / "web"), PATHSPEC),
                            (command, str(root / "apps" / "web"), "error: 1Password: failed to fill whole buffer")):
        assert "This call ran in" not in after(engram_home, S3, ran, error, cwd=cwd), (ran, cwd)


def test_a_commit_no_session_pushed_is_told_before_a_pull_into_its_branch(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    """cipher-box 02-10: a session committed the todo it was starting on `main` (`[main 63dbde7] docs: start work on
    todo`), then branched, pushed the branch and merged it. The next session's `git checkout main && git pull` met
    diverged branches and went looking for the stray commit (both readers: it needed to know). A branch's commits
    no later call pushed (nor reset to the remote's) are told before a pull into it — not into a branch that was
    pushed, and not once a session reset it."""
    branch = "feat/quick-007-ipns-signature-validation"
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Start work on the IPNS signature todo")
    first.bash('git add .planning/todos && git commit -m "docs: start work on todo"',
               "[main 63dbde7] docs: start work on todo\n 2 files changed, 10 insertions(+), 3 deletions(-)")
    first.bash(f"git checkout -b {branch}", f"Switched to a new branch '{branch}'")
    first.bash('git commit -m "feat: validate IPNS record signatures"',
               f"[{branch} a70e79a] feat: validate IPNS record signatures\n 3 files changed")
    first.bash(f"git push -u origin {branch}", f"branch '{branch}' set up to track 'origin/{branch}'.")
    first.bash('git commit -m "fix: address review comments"', f"[{branch} ffe6886] fix: address review comments")
    first.bash("git push", f"To github.com:FSM1/cipher-box.git\n   a70e79a..ffe6886  {branch} -> {branch}")
    first.say("Pushed; the PR is ready.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    committed = [summary for _, _, summary, _ in mined(store, "signal")]
    assert "Committed 63dbde7 on `main`: docs: start work on todo" in committed, committed
    told = before(engram_home, S2, "Bash", {"command": f"git checkout main && git pull && git branch -d {branch}"})
    assert "Local `main` has a commit no session here pushed: `63dbde7` docs: start work on todo (committed " \
           "2026-11-01). A pull into it may meet diverged branches." in told, told
    assert before(engram_home, S3, "Bash", {"command": f"git checkout {branch} && git pull"}) == ""
    assert before(engram_home, S3, "Bash", {"command": "git pull"}) == ""  # on which branch: not known here
    later = Conversation(S4, cwd=CWD, start="2026-11-02T10:00:00")
    later.user("Get main up to date")
    later.bash("git reset --hard origin/main && git pull", "HEAD is now at 4c1d2e3\nAlready up to date.")
    later.say("Main matches origin.", end_turn=True)
    write_conversations(projects_dir, first, later)
    process()
    RecollectionWriter(load_settings()).write(store, S5, "u-s5", "Merge the PR and update main", project=CWD)
    assert before(engram_home, S5, "Bash", {"command": "git checkout main && git pull"}) == ""


def after_read(home: Path, session: str, path: str, error: str = "File does not exist.", cwd: str = CWD) -> str:
    return run_hook("tool_failure.py", home, {
        "session_id": session, "hook_event_name": "PostToolUseFailure", "cwd": cwd, "tool_name": "Read",
        "tool_input": {"file_path": path}, "tool_use_id": "toolu_r", "error": error, "is_interrupt": False})


def test_a_path_that_is_not_there_is_told_where_the_projects_file_of_that_name_is(engram_home: Path,
                                                                                   projects_dir: Path) -> None:
    """cipher-box wrote `12.6-CONTEXT.md` in `.planning/phases/12.6-per-file-ipns-metadata-split/`; the next session
    read it under `…-metadata/` ("File does not exist.") and listed folders until it found it. The files earlier
    sessions worked on are kept by name; right after a call misses a path, the one of that name is told."""
    planned = f"{CWD}/.planning/phases/12.6-per-file-ipns-metadata-split/12.6-CONTEXT.md"
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Discuss phase 12.6")
    first.write(planned, "# Phase 12.6")
    for plan in ("12-multi-factor-authentication/12-PLAN-01.md", "12.1-aes-ctr/12.1-CONTEXT.md", "13-a/13-PLAN.md",
                 "13-b/13-PLAN.md"):
        first.write(f"{CWD}/.planning/phases/{plan}", "# Plan")
    for folder in ("apps/web/src", "apps/api/src", "packages/crypto/src"):
        first.read(f"{CWD}/{folder}/index.ts")
    first.read(f"{CWD}/.planning/todos/pending/2026-02-14-file-metadata-evolution-v2.md")
    first.say("Context written.", end_turn=True)
    write_conversations(projects_dir, first)
    process()
    missed = f"{CWD}/.planning/phases/12.6-per-file-ipns-metadata/12.6-CONTEXT.md"
    told = after_read(engram_home, S2, missed)
    assert f"- `{missed}` is not there: this project's `12.6-CONTEXT.md` is `{planned}` (worked on 2026-11-01)." \
        in told, told
    # The viewer's ledger of what was told records it once, with the path it told.
    store = EpisodeStore(load_settings(), open_store(load_settings().db_path))
    folder = engram_home / "recollections"
    assert ingest(store.conn, folder) == 1 and ingest(store.conn, folder) == 0
    [(content,)] = store.conn.execute("SELECT content FROM injections WHERE session_id = ?", (S2,)).fetchall()
    assert json.loads(content)[0]["bite"] == ("This project's `12.6-CONTEXT.md` is "
                                              "`.planning/phases/12.6-per-file-ipns-metadata-split/12.6-CONTEXT.md`.")
    # A shell's words for it; the path as the command gave it (relative: the project's folder is the shell's).
    shell = after(engram_home, S3, "cat notes/12.6-CONTEXT.md",
                  "Exit code 1\ncat: notes/12.6-CONTEXT.md: No such file or directory")
    assert "this project's `12.6-CONTEXT.md` is `.planning/phases/12.6-per-file-ipns-metadata-split/12.6-CONTEXT.md`" \
        in shell, shell
    # A folder named by a number, guessed by a shorter name (a glob that matched nothing): the one beside it of
    # that number; none when two of that number are there.
    glob = after(engram_home, S5, "ls .planning/phases/12-mfa/*-PLAN.md",
                 "Exit code 1\n(eval):1: no matches found: .planning/phases/12-mfa/*-PLAN.md")
    assert ("- `.planning/phases/12-mfa/` is not there: this project's folder of that number is "
            "`.planning/phases/12-multi-factor-authentication/` (worked on 2026-11-01).") in glob, glob
    assert after(engram_home, S5, "ls .planning/phases/13-x/", "ls: .planning/phases/13-x/: No such file or "
                                                                "directory") == ""
    # Any other folder by its name, leading dots aside (cipher-box 02-16: a Grep of `.todos/` for the project's
    # todos, kept in `.planning/todos/`); none when two of that name were worked in (`src/`).
    todos = run_hook("tool_failure.py", engram_home, {
        "session_id": S5, "hook_event_name": "PostToolUseFailure", "cwd": CWD, "tool_name": "Grep",
        "tool_input": {"pattern": "sendgrid|smtp", "path": f"{CWD}/.todos"}, "tool_use_id": "toolu_g",
        "error": f"<tool_use_error>Path does not exist: {CWD}/.todos</tool_use_error>", "is_interrupt": False})
    assert (f"- `{CWD}/.todos/` is not there: this project's `todos` folder is `{CWD}/.planning/todos/` (worked on "
            "2026-11-01).") in todos, todos
    assert after(engram_home, S5, "ls lib/src/", "ls: lib/src/: No such file or directory") == ""
    # Never a path outside the project's folder (cipher-box's `/usr/local/bin/docker` is no `docker/` of its own),
    # nor a name of another case (BookMinder's `cd BookMinder` is not its package `bookminder/`).
    assert after(engram_home, S5, "/usr/local/bin/todos list", "zsh:1: no such file or directory: "
                                                                "/usr/local/bin/todos") == ""
    assert after(engram_home, S5, "ls Todos/", "ls: Todos/: No such file or directory") == ""
    # The benchmark reads both lines as the hook writes them (bench/precision.py).
    event = {"session_id": S4, "hook_event_name": "PostToolUseFailure", "cwd": CWD, "tool_name": "Bash",
             "tool_input": {"command": "ls notes/12-mfa/*.md"}, "tool_use_id": "toolu_a", "is_interrupt": False,
             "error": "(eval):1: no matches found: .planning/phases/12-mfa/*-PLAN.md"}
    assert [i for i, _ in bench_hook(engram_home, json.dumps(event).encode(), FAILURE_HOOK)] == [
        "where:.planning/phases/12-multi-factor-authentication/"]
    # Told once a session; never in the session that worked on it (it is in its context); nothing for a name in
    # many folders that fit as well, a folder, or a failure that is not a missing path.
    assert after_read(engram_home, S2, missed) == ""
    assert after_read(engram_home, S1, missed) == ""
    assert after_read(engram_home, S4, f"{CWD}/apps/mobile/src/index.ts") == ""
    assert after_read(engram_home, S4, f"{CWD}/.planning/phases/12.6") == ""
    assert after_read(engram_home, S4, missed, error="EACCES: permission denied") == ""


def test_a_file_only_a_session_off_the_record_worked_on_is_never_told(engram_home: Path, projects_dir: Path) -> None:
    secret = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    secret.user("[engram off the record] Draft the salary review")
    secret.write(f"{CWD}/private/salary-review.md", "…")
    secret.say("Drafted.", end_turn=True)
    shared = Conversation(S2, cwd=CWD, start="2026-11-01T11:00:00")
    shared.user("Write the plan")
    shared.write(f"{CWD}/docs/plan.md", "…")
    shared.say("Written.", end_turn=True)
    write_conversations(projects_dir, secret, shared)
    process()
    assert "is `/work/shop/docs/plan.md`" in after_read(engram_home, S3, f"{CWD}/plan.md")
    assert after_read(engram_home, S3, f"{CWD}/salary-review.md") == ""


def test_a_file_told_where_it_is_must_still_be_there_when_the_project_is_on_this_machine(
        engram_home: Path, projects_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "shop"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "VISION.md").write_text("vision")
    first = Conversation(S1, cwd=str(root), start="2026-11-01T10:00:00")
    first.user("Read the vision and the plan")
    first.read(f"{root}/docs/VISION.md")
    first.read(f"{root}/docs/PLAN.md")
    first.say("Read both.", end_turn=True)
    write_conversations(projects_dir, first)
    settings = load_settings()
    Processor(settings).run_once(None)
    store = EpisodeStore(settings, open_store(settings.db_path))
    RecollectionWriter(settings).files.refresh(store.conn, str(root), str(root))
    told = after_read(engram_home, S2, f"{root}/VISION.md", cwd=str(root))
    assert f"is `{root}/docs/VISION.md`" in told, told
    # PLAN.md was removed since: not told; a path that is there failed for another reason: not told.
    assert after_read(engram_home, S2, f"{root}/PLAN.md", cwd=str(root)) == ""
    assert after_read(engram_home, S3, f"{root}/docs/VISION.md", cwd=str(root)) == ""


def test_a_file_too_big_to_read_is_told_before_reading_it_not_its_siblings(engram_home: Path,
                                                                           projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("What did we do on day four?")
    c.tool("Read", {"file_path": f"{CWD}/diary/day-004.md"}, READ_LIMIT, error=True)
    c.tool("Grep", {"pattern": "migration", "path": f"{CWD}/diary/day-004.md"}, "12: the migration")
    c.say("The migration.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "tool_limit")
    assert kind == "fact" and summary.startswith("`diary/day-004.md` is too big for Read")
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "And day five?", project=CWD)
    # Not before a read of a file beside it (BookMinder's day-001.md, 1.3K, told before its read: "changes nothing").
    assert before(engram_home, S2, "Read", {"file_path": f"{CWD}/diary/day-005.md"}) == ""
    told = before(engram_home, S2, "Read", {"file_path": f"{CWD}/diary/day-004.md"})
    assert "`diary/day-004.md` is too big for Read" in told and "beside" not in told, told
    # Not before a Read that takes a part of it (BookMinder's tail of day-004.md: both readers, "changes nothing").
    part = {"file_path": f"{CWD}/diary/day-004.md", "offset": 900, "limit": 120}
    assert before(engram_home, "35353535-0000-4000-8000-000000000009", "Read", part) == ""
    # Not before a call that does not read it whole (BookMinder: told before `git reset claude-dev-log-diary/`).
    assert before(engram_home, S2, "Bash", {"command": "git reset diary/ && git status"}) == ""


def test_a_path_missing_because_an_earlier_cd_moved_the_shell_is_a_lesson_a_typo_is_not(
        engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the app change")
    c.bash("cd apps/web && npm run build", "built in 3.8s")
    c.bash("git add apps/web/src/App.tsx", CD_MOVED, error=True)
    c.bash(f"cd {CWD} && git add apps/web/src/App.tsx", "")
    c.bash("git add notes.txt", "fatal: pathspec 'notes.txt' did not match any files", error=True)
    c.bash("git add NOTES.md", "")
    c.say("Staged.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, _, summary, _)] = mined(store, "error_fix")
    assert summary.startswith("The shell keeps its working directory between calls") and "absolute paths" in summary
    told = after(engram_home, S2, "git add apps/web/src/App.tsx", CD_MOVED)
    assert "an earlier `cd` had moved the shell" in told, told


def test_a_cd_whose_folder_is_not_there_is_told_whatever_the_command_ran_after_it(engram_home: Path,
                                                                                    projects_dir: Path) -> None:
    """BookMinder learned that a `cd` into a folder failed because an earlier `cd` had already moved the shell
    (`cd test-uvenv && … uv pip install …`); four days later `cd BookMinder && git log` failed the same way and
    nothing was told: the lesson was filed under `uv`, the program that never ran. A `cd` that found no folder is
    filed under `cd`, whatever the command went on to run."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Install the test tools in the new environment")
    first.bash("cd test-uvenv && uv venv", "Creating virtual environment at: .venv")
    first.bash("cd test-uvenv && source .venv/bin/activate && uv pip install pytest pytest-describe",
               "Error: (eval):cd:1: no such file or directory: test-uvenv", error=True)
    first.bash("source .venv/bin/activate && uv pip install pytest pytest-describe", "Installed 5 packages in 9ms")
    first.say("Installed.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    [(fix_id, _, summary, _)] = mined(store, "error_fix")
    assert summary.startswith("The shell keeps its working directory between calls"), summary
    told = after(engram_home, S2, "cd BookMinder && git log --oneline -10",
                 "Error: (eval):cd:1: no such file or directory: BookMinder")
    assert fix_id in told and "an earlier `cd` had moved the shell" in told, told
    bash = after(engram_home, S3, "cd docs && make html", "bash: line 1: cd: docs: No such file or directory")
    assert fix_id not in bash  # bash says it in other words: another signature (and another shell)


# Claude Code's refusal of a `cd` out of the session's folder, as recorded (BookMinder's session c6723904).
CD_REFUSED = ("Error: ERROR: cd to '/tmp' was blocked. For security, Claude Code may only change directories to "
              "child directories of the original working directory\n(/work/shop) for this session.")
# A user's own PreToolUse hook blocking a call, in the user's language.
HOOK_BLOCK = ("PreToolUse:Bash hook error: [~/.claude/hooks/guard.sh]: git add -A ist hier verboten: "
              "füge die Dateien einzeln hinzu.")


def test_a_refused_cd_is_told_with_what_worked_instead_whatever_the_command_ran(engram_home: Path,
                                                                                   projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Try the package in a scratch folder")
    c.bash("cd /tmp && mkdir -p scratch && cd scratch && uv venv", CD_REFUSED, error=True)
    c.bash("mkdir -p scratch && cd scratch && uv venv", "Creating virtual environment at: .venv")
    c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "error_fix")
    assert kind == "gotcha" and summary.startswith("Here `cd` may only go below the session's folder: "
                                                   "`cd /tmp && mkdir"), summary
    # A later session refused the same way on its way to another program, in another folder: told what worked.
    told = after(engram_home, S2, "cd /var/tmp && pytest", CD_REFUSED.replace("/tmp", "/var/tmp"))
    assert "what fixed it: `mkdir -p scratch && cd scratch && uv venv`" in told, told


def test_a_call_the_users_hook_blocked_in_another_language_is_told_with_what_got_past_it(
        engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Commit the coupon work")
    c.bash("git add -A", HOOK_BLOCK, error=True)
    c.bash("git add src/coupons.py tests/test_coupons.py", "")
    c.bash('git commit -m "Coupons"', "[main 1a2b3c4] Coupons")
    c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    told = after(engram_home, S2, "git add -A", HOOK_BLOCK)
    assert "what fixed it: `git add src/coupons.py tests/test_coupons.py`" in told, told


# --- 4. standing rules as guards, at the call that breaks them ----------------------------------------------


def test_a_rule_that_forbids_a_command_is_told_before_a_call_that_breaks_it_only(engram_home: Path,
                                                                                 projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Never use `git add -A` in this repo; stage files by name, I keep my notes uncommitted.")
    c.say("Understood.", end_turn=True)
    c.user("Never run `git push --force` here either.")
    c.say("Understood.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Commit the coupon change", project=CWD)
    assert "git add -A" in before(engram_home, S2, "Bash", {"command": "git add -A && git commit -m x"})
    assert before(engram_home, S3, "Bash", {"command": "git add src/coupons.py"}) == ""
    assert "--force" in before(engram_home, S3, "Bash", {"command": "git push --force origin main"})
    assert before(engram_home, S4, "Bash", {"command": "git push origin main"}) == ""


@pytest.mark.parametrize(("untracking", "retired"), [
    ("git rm --cached .DS_Store", True),  # BookMinder's session 5, as typed
    ("git rm --cached .DS_Store bookminder/.DS_Store 2>/dev/null || true", False),  # its failure hidden: no proof
    ("git rm --cached notes.md", False),  # another file
])
def test_what_staging_everything_swept_in_is_no_lesson_once_the_project_stops_tracking_it(
        engram_home: Path, projects_dir: Path, untracking: str, retired: bool) -> None:
    """BookMinder's `git add .` swept in `.DS_Store` (`git restore --staged .DS_Store`); the same day the project
    stopped tracking it (`git rm --cached .DS_Store`, and `.gitignore` took it), yet "`git add .` here also staged
    `.DS_Store`…" was told before every later `git add -A` (one reader: noise three times, "gitignored since")."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Commit the tooling change")
    first.bash("git add . && git status",
               "Changes to be committed:\n\tnew file:   .DS_Store\n\tmodified:   pyproject.toml")
    first.bash("git restore --staged .DS_Store", "")
    first.bash('git commit -m "Modernize tooling"', "[main 018c746] Modernize tooling")
    first.say("Committed.", end_turn=True)
    later = Conversation(S2, cwd=CWD, start="2026-11-01T15:00:00")
    later.user("Stop tracking the .DS_Store files")
    later.bash(untracking, "rm '.DS_Store'")
    later.say("Done.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    [(lesson_id, _, summary, status)] = [m for m in mined(store, "lesson") if "staged `.DS_Store`" in m[2]]
    assert (status == "stale") is retired, summary
    told = before(engram_home, S3, "Bash", {"command": "git add -A && git commit -m 'More'"})
    assert (lesson_id in told) is not retired, told


# BookMinder's user, as typed (session 6): the rule is in what does not work for him, not in a "never".
NOT_IN_MY_CASE = ("Well, you could try that, but in our previous discussion we learned that `git add .` would not "
                  "work in my case whenI have uncommited changes to `claude-dev-log-diary` lying around")


@pytest.mark.parametrize(("said", "rule"), [
    (NOT_IN_MY_CASE, True),
    ("`pytest` does not work here because the fixtures need Docker, so run the unit suite only.", True),
    ("`make` doesn't work yet, I will fix it after lunch.", False),  # a state of the moment
    ("The `npm test` script doesn't work.", False),  # nothing makes it last
    ("`npm run build` doesn't work because of a type error in the coupon form.", False),  # a bug of the moment
])
def test_a_command_the_user_says_does_not_work_for_them_is_a_rule_told_before_it(
        engram_home: Path, projects_dir: Path, said: str, rule: bool) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user(said)
    c.say("Understood.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    rules = [summary for _, _, summary, _ in mined(store, "standing")]
    assert bool(rules) is rule, rules
    assert all(r.startswith("`") for r in rules), rules  # from the command on: not "Well, you could try that, but"
    command = said.split("`")[1]
    shown = before(engram_home, S2, "Bash", {"command": command + " && git status"})
    assert ("work" in shown) is rule, shown
    if said == NOT_IN_MY_CASE:  # staging everything, however typed; not staging a file by name
        assert "claude-dev-log-diary" in before(engram_home, S3, "Bash", {"command": "git add -A"})
        assert before(engram_home, S4, "Bash", {"command": "git add README.md"}) == ""


def test_a_rule_told_before_the_call_that_breaks_it_does_not_open_the_next_sessions(engram_home: Path,
                                                                                      projects_dir: Path) -> None:
    """BookMinder's `git add .` rule opened its next two sessions ("where did we leave off?", an analysis session):
    all four readings, related — it was told again, and useful, before the `git add -A` an hour later. A rule the
    lesson index guards at its call is left out of the digest; one with no call to wait for opens them."""
    c = Conversation(S1, cwd=CWD)
    c.user(NOT_IN_MY_CASE)
    c.say("Understood.", end_turn=True)
    c.user(FEATURE_BRANCH_RULE)
    c.say("Understood.", end_turn=True)
    write_conversations(projects_dir, c)
    # The processor's pass alone: the rule said in the session's last round is filed (and guarded) before the next
    # session starts, not at that session's first prompt.
    Processor(load_settings()).run_once(None)
    opened = digest(engram_home, S2)
    assert "switch to a feature branch" in opened and "would not work in my case" not in opened, opened
    assert "would not work in my case" in before(engram_home, S2, "Bash", {"command": "git add -A && git status"})


@pytest.mark.parametrize(("rule", "forbidden"), [
    ("Decision: we switched to `pnpm`. From now on use `pnpm` instead of `npm` in this project.", ["npm"]),
    ("Instead of `npm test`, run `pnpm --filter api test`.", ["npm test"]),
    ("Never use `git add -A` here; stage files by name.", ["git add -A"]),
])
def test_a_rule_that_says_instead_of_forbids_what_it_drops_not_what_it_keeps(rule: str, forbidden: list[str]) -> None:
    assert forbidden_commands([rule]) == forbidden
    assert guard("npm") == ("prog:npm", [])  # a program: every call of it, whatever it goes on to run


FEATURE_BRANCH_RULE = ("also, as a general rule, switch to a feature branch is literally the first thing you should, "
                       "the moment you know what you're working on.. if you are already on a feature branch, check "
                       "that it is the right feature branch for the task youre working on. if not, always go back to "
                       "main, pull the latest, and branch off from there.")  # cipher-box, as the user typed it


def test_a_rule_is_told_whole_with_the_sentences_that_go_on_with_it(engram_home: Path, projects_dir: Path) -> None:
    """The readers found cipher-box's feature-branch rule cut after its first sentence, where what a later session
    needed was the rest: check the branch is the right one, else branch off a fresh main."""
    from processor.memory.preferences import standing_statements

    [rule] = standing_statements(FEATURE_BRANCH_RULE, CWD)
    assert rule.text.endswith("always go back to main, pull the latest, and branch off from there.")
    [first, second] = standing_statements("Always run `make lint` before pushing. Also the login page is broken, "
                                          "can you look? And never push to main directly.", CWD)
    assert first.text == "Always run `make lint` before pushing."  # a separate matter is not part of the rule
    assert second.text == "Never push to main directly."  # on its own: no "And" tying it to what came before
    [tied] = standing_statements("That's fine. Then in the future, push back when I steer you in a wrong way, always "
                                 "explaining what's the purpose.", CWD)  # BookMinder's, 05-04
    assert tied.text.startswith("In the future, push back when I steer you in a wrong way"), tied.text
    c = Conversation(S1, cwd=CWD)
    c.user(FEATURE_BRANCH_RULE)
    c.say("Understood.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    assert "and branch off from there." in digest(engram_home, S2)


@pytest.mark.parametrize(("said", "rule"), [
    # cipher-box 644f505c (2026-02-10), as typed: a prompt, and a message typed while the agent worked.
    ("sorry continue, i tohught you had pushed something to `main` earlier. no commits directly to main, ever!!!",
     "no commits directly to main, ever!!!"),
    ("you do understand that I am trusting you a lot by having you sign commits with these keys, and hence be able "
     "to override branch protection rules, but branch protection rules should not ever be overwritten by you, ever. "
     "I need you to note this down in your core memories.", "branch protection rules should not ever be overwritten"),
    ("it broke again!! never works", None),  # a shout that is no rule
    ("I never saw that, ever.", None),
    ("No way, ever!!", None),
])
def test_a_rule_said_with_emphasis_is_a_rule(said: str, rule: str | None) -> None:
    """The user's sharpest rules are shouted; a shout alone is venting, but a shouted never or ", ever" is a rule."""
    from processor.memory.preferences import standing_statements

    found = [s.text for s in standing_statements(said, CWD)]
    assert (found and rule in found[0]) if rule else found == [], found


# --- 5. remarks at prompts: never a rule --------------------------------------------------------------------


@pytest.mark.parametrize("remark", [
    "1 does seem like a decent path forward, though I feel like we might want to improve this in future.",
    "Before committing, lets switch to main, grab the latest and create a branch for the new phase.",
    "I'm wondering, since on line 34 we use `plistlib.loads`, what's the purpose of the conversion.",
    "Please keep that in mind for all ledger code.",
    # BookMinder's, at the prompt of the session that then switched: opening the next sessions it was noise or
    # related to all four readings (done; it names nothing it replaced).
    "Let's switch to `uv`.",
])
def test_a_remark_a_request_or_a_follow_up_is_never_told_as_a_rule(engram_home: Path, projects_dir: Path,
                                                                   remark: str) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user(remark)
    c.say("OK.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    assert store.conn.execute("SELECT count(*) FROM episodes WHERE source_type = 'auto'").fetchone()[0] == 0


def test_a_rule_mined_from_the_users_words_is_not_told_at_a_prompt_that_shares_its_words(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box's feature-branch rule came back at "switch to the phase 12 branch", "ok lets go back to pr 133
    branch": the prompt already says what the rule would. A mined rule opens the next sessions (the digest) and
    guards its call; what the user stored on purpose is still told at a prompt about it."""
    c = Conversation(S1, cwd=CWD)
    c.user("Also, as a general rule, switch to a feature branch the moment you know what you're working on.")
    c.say("Will do.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(rule_id, *_)] = mined(store, "standing")
    kept, _ = store.remember("Feature branches are named feat/<phase>-<topic>, cut from main.", kind="convention",
                             scope="project", project=CWD)
    path = RecollectionWriter(load_settings()).write(store, S2, "u-s2", "switch to a feature branch for phase 12",
                                                     project=CWD)
    told = [b["id"] for b in json.loads(Path(path).read_text())["bites"]] if path else []
    assert rule_id not in told and kept in told, told
    assert rule_id in digest(engram_home, S2)  # the next session opens with it


# --- 6. where the last session stopped ----------------------------------------------------------------------


def test_the_next_session_starts_with_where_the_last_one_stopped(engram_home: Path, projects_dir: Path) -> None:
    an_hour_ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600))
    c = Conversation(S1, cwd=CWD, start=an_hour_ago)
    c.user("Add coupons")
    c.tool("TodoWrite", {"todos": [{"content": "Add the coupon model", "status": "completed"},
                                   {"content": "Wire coupons into checkout", "status": "in_progress"},
                                   {"content": "Document coupons", "status": "pending"}]}, "Todos updated")
    c.say("Stopping here for today.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    event = {"session_id": S2, "cwd": CWD, "hook_event_name": "SessionStart", "source": "startup",
             "transcript_path": f"/x/{S2}.jsonl"}
    out = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / "session_start.py")],
                         input=json.dumps(event).encode(), capture_output=True, timeout=30,
                         env={"ENGRAM_HOME": str(engram_home), "PATH": "/usr/bin:/bin"}).stdout
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert ("Its todo list was left with in progress: Wire coupons into checkout; pending: Document coupons"
            in context), context
    assert "Add the coupon model" not in context


# BookMinder's session 3 closed on this summary (cut) and its commits; session 4 opened with the question, as typed.
CLOSING = ("Great! We've now successfully: 1. Created an astral branch with modernized tooling 2. Updated the project "
           "to use ruff and uv 3. Created comprehensive documentation for using uv 4. Provided instructions for "
           "setting up the GitHub repository. Here's what you need to do next: 1. Create the GitHub repository.")


@pytest.mark.parametrize(("prompt", "told"), [
    ("do you know what we did in out last session?", True),
    ("Hi, have a look around the project... where did we left off?", True),
    # A remark about earlier sessions asks nothing (BookMinder's session 7).
    ("But you are misinterpreting the cost gains, since all previous sessions on BookMinder were still done with "
     "Sonnet 3.7.", False),
])
def test_asked_where_the_last_session_left_off_the_prompt_is_told_what_it_did(
        engram_home: Path, projects_dir: Path, prompt: str, told: bool) -> None:
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Let's modernize the tooling on a branch of its own")
    first.bash('git commit -m "Modernize tooling with uv and ruff"',
               "[astral 018c746] Modernize tooling with uv and ruff")
    first.bash('git commit -m "Add GitHub setup instructions"', "[astral 3901a5e] Add GitHub setup instructions")
    first.say(CLOSING, end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", prompt, project=CWD)
    bites = json.loads((load_settings().recollections_dir / f"{S2}.json").read_text())["bites"]
    recap = [b for b in bites if b["bite"].startswith("The last session of this project")]
    assert bool(recap) is told, bites
    if told:
        [line] = recap
        assert line["bite"].startswith("The last session of this project (2026-11-01) ended saying: “Great! We've "
                                       "now successfully: 1. Created an astral branch"), line
        assert "committed `018c746` Modernize tooling with uv and ruff; `3901a5e` Add GitHub setup" in line["bite"]
        assert line["id"].startswith("msg_") and len(line["bite"]) <= 600


# BookMinder 2d940778's last message (2025-05-21), whole: what was left to do came after what was done.
CLOSING_WHOLE = """Great! We've now successfully:

1. Created an astral branch with modernized tooling
2. Updated the project to use ruff and uv
3. Created comprehensive documentation for using uv
4. Provided instructions for setting up the GitHub repository
5. Successfully tested the configuration with a new uv environment

Here's a summary of what you need to do next:

1. Create the GitHub repository at github.com/palimondo/BookMinder
2. Follow the instructions in GITHUB_SETUP.md to push your repository
3. On your MacBook Air, follow the instructions in docs/uv_setup.md for a fresh installation

This will allow you to work on both machines and share your project publicly. The changes to modern tooling will \
make development more efficient and provide a better experience for other potential contributors.

Is there anything else you'd like me to help with?"""


def test_the_recap_keeps_what_the_last_session_said_was_left_to_do(engram_home: Path, projects_dir: Path) -> None:
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Let's modernize the tooling on a branch of its own")
    first.bash('git commit -m "Modernize tooling with uv and ruff"',
               "[astral 018c746] Modernize tooling with uv and ruff")
    first.say(CLOSING_WHOLE, end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "do you know what we did in out last session?",
                                              project=CWD)
    bites = json.loads((load_settings().recollections_dir / f"{S2}.json").read_text())["bites"]
    [recap] = [b["bite"] for b in bites if b["bite"].startswith("The last session of this project")]
    assert "what you need to do next: 1. Create the GitHub repository at github.com/palimondo/BookMinder 2. Follow " \
           "the instructions in GITHUB_SETUP.md" in recap, recap
    assert recap.startswith("The last session of this project (2026-11-01) ended saying: “Great! We've now "
                            "successfully: 1. Created an astral branch"), recap
    assert "anything else" not in recap and len(recap) <= 600, recap


@pytest.mark.parametrize(("changed", "named"), [
    ((["TODO.md", "README.md"], ["src/app.py"], ["TODO.md"], ["README.md"]), "`TODO.md` (changed in 2 of the last 4)"),
    ((["TODO.md"], ["src/app.py"], ["README.md"], ["README.md"]), "`TODO.md` (changed in 1 of the last 4)"),
    ((["NOTES.md", "README.md"], ["src/app.py"], ["README.md"], ["docs/state-machine.md"]), None),
])
def test_the_recap_names_the_file_the_projects_sessions_keep_their_open_work_in(
        engram_home: Path, projects_dir: Path, changed: tuple[list[str], ...], named: str | None) -> None:
    """BookMinder: one of the five sessions before 05-29 pinned its priorities atop `TODO.md`; asked
    "where did we left off?", the next session recapped the last one's analysis and the user had to ask "Did you
    check TODO.md and CLAUDE.md?" (both readers: the recap missed it). A `TODO.md` (`ROADMAP.md`, `STATE.md`, …)
    changed in any of the last five sessions is named with the recap."""
    sessions = []
    for n, paths in enumerate(changed):
        c = Conversation(f"35353535-0000-4000-8000-0000000004{n:02d}", cwd=CWD, start=f"2026-11-0{n + 1}T10:00:00")
        c.user("Work on the next pinned item")
        for path in paths:
            c.edit(f"{CWD}/{path}")
        c.say(CLOSING, end_turn=True)
        sessions.append(c)
    write_conversations(projects_dir, *sessions)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "where did we left off?", project=CWD)
    bites = json.loads((load_settings().recollections_dir / f"{S2}.json").read_text())["bites"]
    [recap] = [b["bite"] for b in bites if b["bite"].startswith("The last session of this project")]
    if named:
        assert recap.endswith(f" This project's sessions keep their open work in {named}."), recap
    else:
        assert "open work" not in recap, recap
    assert len(recap) <= 600, recap


@pytest.mark.parametrize(("prompt", "told"), [
    ("ok so where were we?", False),  # cipher-box's, right after a /compact: this session's work
    ("and what did we do in our last session?", True),  # names it
])
def test_where_were_we_in_a_session_that_already_had_prompts_is_about_that_session(
        engram_home: Path, projects_dir: Path, prompt: str, told: bool) -> None:
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Let's modernize the tooling on a branch of its own")
    first.say(CLOSING, end_turn=True)
    going = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    going.user("Let's plan the MFA phase")
    going.say("Here is the plan for MFA: TOTP first, then recovery codes, then WebAuthn.", end_turn=True)
    write_conversations(projects_dir, first, going)
    store = process()
    writer = RecollectionWriter(load_settings())
    writer.write(store, S2, "u-s2-later", prompt, project=CWD)
    bites = json.loads((load_settings().recollections_dir / f"{S2}.json").read_text())["bites"]
    assert any(b["bite"].startswith("The last session of this project") for b in bites) is told, bites
    # A session whose earlier prompt the processor answered (its recollection file), not yet captured, the same.
    writer.write(store, S3, "u-s3-first", "Let's plan the MFA phase with TOTP and recovery codes", project=CWD)
    writer.write(store, S3, "u-s3-later", prompt, project=CWD)
    bites = json.loads((load_settings().recollections_dir / f"{S3}.json").read_text())["bites"]
    assert any(b["bite"].startswith("The last session of this project") for b in bites) is told, bites


def test_items_the_last_session_put_off_for_later_are_not_where_it_stopped(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    """BookMinder's session ended having done its work and written two "(future)" items into TODO.md; the next
    session opened with "Its todo list was left with pending: Create minimal EPUB test file with TOC (future);
    pending: Add more test books when needed (future)": both readers read it as background. An item the list
    itself puts off is not where the session stopped; one left open beside them is."""
    an_hour_ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600))
    c = Conversation(S1, cwd=CWD, start=an_hour_ago)
    c.user("Fix the CI tests with fixtures")
    c.tool("TodoWrite", {"todos": [{"content": "Fix CI tests using fixtures", "status": "completed"},
                                   {"content": "Create minimal EPUB test file with TOC (future)", "status": "pending"},
                                   {"content": "Add more test books when needed (future)", "status": "pending"}]},
           "Todos updated")
    c.say("CI is green.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    assert "todo list" not in digest(engram_home, S2)
    c.tool("TodoWrite", {"todos": [{"content": "Create minimal EPUB test file with TOC (future)", "status": "pending"},
                                   {"content": "Mark CI issues resolved in TODO.md", "status": "pending"}]},
           "Todos updated")
    c.say("Stopping here.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    opened = digest(engram_home, S3)
    assert "Its todo list was left with pending: Mark CI issues resolved in TODO.md" in opened, opened
    assert "(future)" not in opened, opened


# --- 7 and 8. corrections about named things; how the user wants a file worked on --------------------------


def test_a_correction_about_a_name_is_told_when_a_later_call_touches_it(engram_home: Path,
                                                                        projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Sum the orders")
    c.tool("Grep", {"pattern": "total", "path": f"{CWD}/src"}, "src/orders.py:12: total = 0")
    c.say("I'll sum `orders.total`.")
    c.user("No, the column is `total_cents`, not `total`.")
    c.say("Right.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Report revenue", project=CWD)
    assert "total_cents" in before(engram_home, S2, "Grep", {"pattern": "total_cents", "path": f"{CWD}/src"})


def test_a_correction_taken_back_the_next_day_is_told_as_the_later_one_only(engram_home: Path,
                                                                            projects_dir: Path) -> None:
    """Bad input: a correction reverted the next day. The later one wins, the earlier is retired (superseded: still
    recalled, marked), never both told."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Sum the orders")
    first.tool("Grep", {"pattern": "total", "path": f"{CWD}/src"}, "src/orders.py:12: total = 0")
    first.say("I'll sum `orders.total`.")
    first.user("No, the column is `total_cents`, not `total`.")
    first.say("Right.", end_turn=True)
    later = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    later.user("Report the revenue")
    later.tool("Grep", {"pattern": "total_cents", "path": f"{CWD}/src"}, "")
    later.say("I'll use `total_cents`.")
    later.user("No, we reverted that migration yesterday: the column is `total` again, not `total_cents`.")
    later.say("Right.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    RecollectionWriter(load_settings()).write(store, S3, "u-s3", "Report revenue by month", project=CWD)
    told = before(engram_home, S3, "Grep", {"pattern": "total_cents", "path": f"{CWD}/src"})
    assert "the column is `total` again, not `total_cents`" in told, told
    assert "the column is `total_cents`, not `total`" not in told, told
    assert [(status, summary) for _, _, summary, status in mined(store, "correction")] == [
        ("superseded", "No, the column is `total_cents`, not `total`."),
        ("active", "No, we reverted that migration yesterday: the column is `total` again, not `total_cents`.")]


@pytest.mark.parametrize(("said", "kept"), [
    ("No need for saving the explanation in README. process with your original brief update", False),  # BookMinder
    ("No worries, README can wait.", False),
    ("No, the database is `library.sqlite`.", True),
    ("Actually the config lives in `settings.toml`.", True),
])
def test_a_request_that_starts_with_no_is_not_a_correction(engram_home: Path, projects_dir: Path, said: str,
                                                           kept: bool) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Update the docs")
    c.tool("Read", {"file_path": f"{CWD}/README.md"}, "# Shop")
    c.say("I'll explain the setup in README.")
    c.user(said)
    c.say("OK.", end_turn=True)
    write_conversations(projects_dir, c)
    assert bool(mined(process(), "correction")) is kept


def test_how_the_user_wants_this_file_worked_on_is_told_when_it_is_edited(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Speed up the build script")
    c.edit(f"{CWD}/scripts/build.sh")
    c.user("No explanatory comments in this script please.")
    c.edit(f"{CWD}/scripts/build.sh")
    c.say("Removed them.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    RecollectionWriter(load_settings()).write(store, S2, "u-s2", "Make the build parallel", project=CWD)
    assert before(engram_home, S2, "Read", {"file_path": f"{CWD}/scripts/build.sh"}) == ""  # reading it: not yet
    assert "No explanatory comments" in before(engram_home, S2, "Edit", {"file_path": f"{CWD}/scripts/build.sh",
                                                                         "old_string": "a", "new_string": "b"})
    assert before(engram_home, S3, "Edit", {"file_path": f"{CWD}/src/app.py", "old_string": "a",
                                            "new_string": "b"}) == ""


# --- 10. work under a slash command is the session's work -----------------------------------------------------


def test_a_slash_command_is_captured_as_the_prompt_it_is() -> None:
    line = json.dumps({"type": "user", "uuid": "u-cmd", "sessionId": S1, "timestamp": "2026-11-01T10:00:00Z",
                       "message": {"role": "user", "content": "<command-message>gsd:plan-phase</command-message>\n"
                                   "<command-name>/gsd:plan-phase</command-name>\n<command-args>12.2</command-args>"}})
    parsed = parse_line(line.encode())
    assert parsed.role == "user" and parsed.text == "/gsd:plan-phase 12.2"
    clear = json.dumps({"type": "user", "uuid": "u-clear", "sessionId": S1, "message": {
        "role": "user", "content": "<command-name>/clear</command-name>\n<command-message>clear</command-message>"}})
    assert type(parse_line(clear.encode())).__name__ == "Skipped"


# --- 12. decisions in plain words ----------------------------------------------------------------------------


def test_a_decision_in_plain_words_is_kept_and_its_follow_up_is_not(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Decision: the ledger service stores money as integer cents, never floats. "
           "Please keep that in mind for all ledger code.")
    c.say("Noted.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "decision")
    assert kind == "decision" and summary.startswith("Decision: the ledger service stores money as integer cents")
    assert mined(store, "standing") == []  # "keep that in mind" has no referent of its own


def digest(home: Path, session: str) -> str:
    event = {"session_id": session, "cwd": CWD, "hook_event_name": "SessionStart", "source": "startup",
             "transcript_path": f"/x/{session}.jsonl"}
    out = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / "session_start.py")],
                         input=json.dumps(event).encode(), capture_output=True, timeout=30,
                         env={"ENGRAM_HOME": str(home), "PATH": "/usr/bin:/bin"}).stdout
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def test_a_rule_the_user_later_reverses_is_told_as_the_later_one_only(engram_home: Path, projects_dir: Path) -> None:
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("From now on, always use `npm` to install packages in this project.")
    first.say("Will do.", end_turn=True)
    write_conversations(projects_dir, first)
    process()
    assert "always use `npm`" in digest(engram_home, S3)
    later = Conversation(S2, cwd=CWD, start="2026-11-05T10:00:00")
    later.user("Decision: we switched to `pnpm`. From now on use `pnpm` instead of `npm` in this project.")
    later.say("Switched.", end_turn=True)
    write_conversations(projects_dir, first, later)
    store = process()
    told = digest(engram_home, S4)
    assert "always use `npm`" not in told, told  # the earlier rule is retired, never told beside the later
    # The later rule forbids a command: told before a call that breaks it, not at the session's start.
    assert "instead of `npm`" not in told, told
    RecollectionWriter(load_settings()).write(store, S4, "u-s4", "Add lodash", project=CWD)
    guard = before(engram_home, S4, "Bash", {"command": "npm install lodash"})
    assert "instead of `npm`" in guard and "always use `npm`" not in guard, guard


# --- 13. what the extractor learned is told as what the miners learned ----------------------------------------


def test_a_fact_the_extractor_anchored_to_a_file_is_told_before_a_call_on_it(engram_home: Path) -> None:
    from processor.jobs import JobRunner
    from processor.jobs.backends.mock_backend import MockBackend
    from tests.support.jobs_fixtures import add_messages, drain, make_settings, now_ms

    settings = make_settings()
    add_messages(settings, S1, [("user", "Why is the schema out of date?"),
                                ("assistant", "src/db/schema.ts is generated by `pnpm db:gen` from prisma; "
                                              "editing it by hand is lost on the next generate."),
                                ("user", "ok regenerate it"), ("assistant", "Done.")],
                 project=CWD, activity_ms=now_ms() - 10 * 60_000)
    fact = {"summary": "src/db/schema.ts is generated by `pnpm db:gen`; hand edits are lost",
            "full_content": "The schema file is generated from prisma.", "entities": ["prisma"],
            "anchors": ["src/db/schema.ts"], "importance": "normal", "kind": "fact", "scope": "project"}
    remark = {"summary": "The user asked to regenerate the schema", "full_content": "A remark on the task.",
              "entities": ["schema"], "anchors": [], "importance": "normal", "kind": "fact", "scope": "project"}
    runner = JobRunner(settings, backend=MockBackend([{"memories": [fact, remark], "rolling_summary": "schema"}]))
    drain(runner)
    runner.close()
    store = EpisodeStore(settings, open_store(settings.db_path))
    assert [s for _, _, s, _ in mined(store, "fact")] == [fact["summary"]]  # the unanchored remark is recall-only
    RecollectionWriter(settings).lessons.refresh(store.conn, CWD, CWD)
    RecollectionWriter(settings).write(store, S2, "u-s2", "Add a column to users", project=CWD)
    told = before(engram_home, S2, "Edit", {"file_path": f"{CWD}/src/db/schema.ts", "old_string": "a",
                                            "new_string": "b"})
    assert "generated by `pnpm db:gen`" in told and "regenerate" not in told
    assert before(engram_home, S2, "Read", {"file_path": f"{CWD}/src/app.ts"}) == ""


def test_the_extractor_through_a_model_api_files_its_typed_memories_where_the_miners_do(
        engram_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same, through the openai backend and a real loopback model API answering a scripted extraction: a fact
    anchored to a file is told before an edit of it, a wish about how a file is worked on before an edit of that
    file (not at a read of it), and what is anchored to nothing is recalled only."""
    from processor.jobs import JobRunner
    from tests.support.fake_openai_server import FakeOpenAI
    from tests.support.jobs_fixtures import add_messages, drain, make_settings, now_ms

    fact = {"summary": "src/db/schema.ts is generated by `pnpm db:gen`; hand edits are lost",
            "full_content": "The schema file is generated from prisma.", "entities": ["prisma"],
            "anchors": ["src/db/schema.ts"], "importance": "normal", "kind": "fact", "scope": "project"}
    wish = {"summary": "No explanatory comments in scripts/release.sh: the user keeps it terse",
            "full_content": "The user asked twice to strip comments from the release script.", "entities": [],
            "anchors": ["scripts/release.sh"], "importance": "normal", "kind": "preference", "scope": "project"}
    remark = {"summary": "The user asked to regenerate the schema", "full_content": "A remark on the task.",
              "entities": ["schema"], "anchors": [], "importance": "normal", "kind": "fact", "scope": "project"}
    server = FakeOpenAI(models={"gpt-4.1-nano"}).start()
    try:
        server.content_for = lambda body: json.dumps({"memories": [fact, wish, remark], "rolling_summary": "schema"})
        monkeypatch.setenv("ENGRAM_TEST_OPENAI_KEY", "sk-test-0123456789")
        settings = make_settings(extractor="openai", openai_base_url=server.base_url, openai_model="gpt-4.1-nano",
                                 openai_api_key_env="ENGRAM_TEST_OPENAI_KEY", llm_timeout_seconds=5.0)
        add_messages(settings, S1, [("user", "Why is the schema out of date?"),
                                    ("assistant", "src/db/schema.ts is generated by `pnpm db:gen` from prisma."),
                                    ("user", "no comments in scripts/release.sh please"), ("assistant", "Done.")],
                     project=CWD, activity_ms=now_ms() - 10 * 60_000)
        runner = JobRunner(settings)
        drain(runner)
        runner.close()
        assert len(server.calls) == 1  # one extraction, through the API
    finally:
        server.stop()
    store = EpisodeStore(settings, open_store(settings.db_path))
    kinds = {summary: kind for _, kind, summary, _ in mined(store, "fact") + mined(store, "file")}
    assert kinds.get(fact["summary"]) == "fact", kinds
    RecollectionWriter(settings).lessons.refresh(store.conn, CWD, CWD)
    RecollectionWriter(settings).write(store, S2, "u-s2", "Add a column to users", project=CWD)
    edit = {"old_string": "a", "new_string": "b"}
    assert "generated by `pnpm db:gen`" in before(engram_home, S2, "Edit", {"file_path": f"{CWD}/src/db/schema.ts",
                                                                             **edit})
    assert before(engram_home, S3, "Read", {"file_path": f"{CWD}/scripts/release.sh"}) == ""
    told = before(engram_home, S3, "Edit", {"file_path": f"{CWD}/scripts/release.sh", **edit})
    assert "No explanatory comments in scripts/release.sh" in told and "regenerate" not in told, told


# --- bad input --------------------------------------------------------------------------------------------------


def test_a_todo_list_rewritten_thirty_times_is_told_as_it_was_last(engram_home: Path, projects_dir: Path) -> None:
    an_hour_ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600))
    c = Conversation(S1, cwd=CWD, start=an_hour_ago)
    c.user("Work through the checkout bugs")
    for step in range(30):
        c.tool("TodoWrite", {"todos": [{"content": f"Fix checkout bug {n}",
                                        "status": "completed" if n < step else "in_progress" if n == step
                                        else "pending"} for n in range(31)]}, "Todos updated")
    c.say("Stopping here.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    told = digest(engram_home, S2)
    assert "in progress: Fix checkout bug 29; pending: Fix checkout bug 30" in told, told
    assert "Fix checkout bug 28" not in told and told.count("in progress") == 1, told


def test_a_fix_whose_command_carries_a_secret_is_stored_and_told_redacted(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    token = "ghp_" + "R8x2Kq9LmZ4vT7wB1nC5yD3fH6jP0sA2uE8i"
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Publish the package")
    c.bash("npm publish", "npm ERR! code ENEEDAUTH\nnpm ERR! need auth This command requires you to be logged in.",
           error=True)
    c.bash(f"NPM_TOKEN={token} npm publish", "+ shop@1.0.0")
    c.say("Published.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    stored = " ".join(str(v) for row in store.conn.execute("SELECT summary, full_content FROM episodes") for v in row)
    assert token not in stored and "npm publish" in stored
    told = after(engram_home, S2, "npm publish", "npm ERR! code ENEEDAUTH\nnpm ERR! need auth This command "
                                                 "requires you to be logged in.")
    assert "npm publish" in told and token not in told, told


def test_a_session_of_slash_commands_only_is_captured_and_teaches_no_rule(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    for command in ("/init", "/review", "/compact", "/clear"):
        c.user(f"<command-name>{command}</command-name>\n<command-message>{command[1:]}</command-message>\n"
               "<command-args></command-args>")
        c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    assert store.conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", (S1,)).fetchone()[0] >= 4
    assert store.conn.execute("SELECT count(*) FROM episodes WHERE source_type = 'auto'").fetchone()[0] == 0


def test_two_projects_with_the_same_folder_name_keep_their_lessons_apart(engram_home: Path,
                                                                         projects_dir: Path) -> None:
    other = "/srv/elsewhere/shop"  # the same folder name as CWD, another project
    write_conversations(projects_dir, commit_session(S1, "2026-11-01T10:00:00", PRE_COMMIT),
                        commit_session(S2, "2026-11-02T10:00:00", PRE_COMMIT))
    process()
    assert "pre-commit run --all-files" in before(engram_home, S3, "Bash", {"command": 'git commit -m "X"'})
    elsewhere = run_hook("pretooluse.py", engram_home, {
        "session_id": S4, "hook_event_name": "PreToolUse", "cwd": other, "tool_name": "Bash",
        "tool_input": {"command": 'git commit -m "X"'}, "tool_use_id": "toolu_c"})
    assert elsewhere == ""


# --- a commit hook's refusal, wherever it was met -----------------------------------------------------------------

# cipher-box's lint-staged under husky (2026-02-13), whole: it says "git stash" on its way, and markdownlint's line
# says what failed. The path is this test's project.
MD001 = ("Exit code 1\n[STARTED] Backing up original state...\n"
         "[COMPLETED] Backed up original state in git stash (cdd688a6c)\n[STARTED] Running tasks for staged files...\n"
         "[STARTED] package.json — 2 files\n[STARTED] *.{ts,tsx,js,jsx} — 0 files\n[STARTED] *.md — 2 files\n"
         "[SKIPPED] *.{ts,tsx,js,jsx} — no files\n[STARTED] markdownlint --fix\n[FAILED] markdownlint --fix [FAILED]\n"
         "[FAILED] markdownlint --fix [FAILED]\n[COMPLETED] Running tasks for staged files...\n"
         "[STARTED] Applying modifications from tasks...\n[SKIPPED] Skipped because of errors from tasks.\n"
         "[STARTED] Reverting to original state because of errors...\n"
         "[COMPLETED] Reverting to original state because of errors...\n\n✖ markdownlint --fix:\n"
         "{path}:16 error MD001/heading-increment Heading levels should only increment by one level at a time "
         "[Expected: h2; Actual: h3]\nhusky - pre-commit script failed (code 1)")
# cipher-box's own check (scripts/check-api-client.sh) under husky, whole.
API_CLIENT = ("Exit code 1\n\n⚠️  API source files changed but generated client files are not staged!\n\n"
              "You modified API DTOs, controllers, or entities but didn't regenerate the client.\n\n"
              "Run this command and stage the changes:\n\n    pnpm api:generate\n\nMissing generated files:\n"
              "    - packages/api-client/openapi.json\n\nTo skip this check (not recommended), use: "
              "git commit --no-verify\n\nhusky - pre-commit script failed (code 1)")


def context_commit(phase: str) -> str:
    return (f"git add .planning/phases/{phase}/{phase}-CONTEXT.md "
            ".planning/todos/pending/2026-02-13-deterministic-vault-ipns-derivation.md && "
            f"git commit -m \"docs({phase}): capture phase context\"")


def test_a_check_the_session_got_past_by_changing_the_file_it_checked_is_told_why_after_it_fails_again(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box's lint-staged stopped a `*-CONTEXT.md` commit three times (markdownlint MD001: the template's
    `<domain>` wrapper tags); each session found why anew. Its refusal is the commit's (not the `git add` before it,
    though lint-staged says "git stash"), and the session's why, said between the refusal and the edit that got
    past it, is the lesson: told right after the same refusal, never before the commit (the file is fixed), and
    before the next `*-CONTEXT.md` is written."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("/gsd:discuss-phase 12.2")
    context = f"{CWD}/.planning/phases/12.2/12.2-CONTEXT.md"
    first.write(context, "<domain>\n## Phase Boundary\n</domain>\n")
    first.bash(context_commit("12.2"), MD001.replace("{path}", context), error=True)
    first.read(f"{CWD}/.planning/phases/12/12-CONTEXT.md")
    first.say("The Phase 12 context doesn't use the `<domain>`/`<decisions>` wrapper tags. The markdown linter gets "
              "confused by them. Let me remove those tags.")
    first.edit(context, "<domain>\n## Phase Boundary", "## Phase Boundary")
    first.bash(context_commit("12.2"), "[main 1a2b3c4] docs(12.2): capture phase context")
    first.say("Committed.", end_turn=True)
    write_conversations(projects_dir, first)
    store = process()
    # Not "run `markdownlint --fix` first": it would fail the same way.
    [(_, kind, summary, _)] = mined(store, "error_fix")
    assert kind == "gotcha" and summary.startswith("The Phase 12 context doesn't use the `<domain>`"), summary
    again = f"{CWD}/.planning/phases/12.3/12.3-CONTEXT.md"
    told = after(engram_home, S2, context_commit("12.3"), MD001.replace("{path}", again))
    assert "wrapper tags" in told and "12.2-CONTEXT.md" in told, told
    assert before(engram_home, S3, "Bash", {"command": context_commit("12.4")}) == ""
    # Before the next file of its kind is written (from the same template): cipher-box's moments were the writes.
    next_context = {"file_path": f"{CWD}/.planning/phases/12.4/12.4-CONTEXT.md", "content": "<domain>\n"}
    assert before(engram_home, S4, "Read", next_context) == ""
    told = before(engram_home, S4, "Write", next_context)
    said = "`12.2-CONTEXT.md` made `git commit` fail here (markdownlint --fix) until it was changed: The Phase 12"
    assert said in told, told
    assert before(engram_home, S5, "Write", {"file_path": f"{CWD}/.planning/phases/12.4/NOTES.md", "content": ""}) == ""


def test_a_refusal_of_a_commit_after_staging_many_files_is_the_commits(engram_home: Path,
                                                                        projects_dir: Path) -> None:
    """cipher-box staged seven files and committed in one call; the husky check's refusal was keyed as the `git add`
    (its files filled the call's keys before the `git commit`), so the go that ran clean was never another go at it
    and the fix (`pnpm api:generate`) was kept only by luck of the words."""
    files = " ".join(f"apps/api/src/ipns/part{n}.ts" for n in range(7))
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the review fixes")
    c.bash(f'git add {files} && git commit -m "fix(api): review"', API_CLIENT, error=True)
    c.bash("pnpm api:generate 2>&1 | tail -5", "Generated packages/api-client/openapi.json")
    c.bash(f'git add {files} packages/api-client/openapi.json && git commit -m "fix(api): review"',
           "[main 5e6f7a8] fix(api): review")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, _, summary, _)] = mined(store, "error_fix")
    assert "What fixed it: `pnpm api:generate" in summary, summary
    told = after(engram_home, S2, f'git add {files} && git commit -m "fix(api): more"', API_CLIENT)
    assert "pnpm api:generate" in told, told


def test_a_commit_its_hook_stopped_though_the_call_exited_zero_is_learned_from(engram_home: Path,
                                                                                projects_dir: Path) -> None:
    """BookMinder's first session met pre-commit's refusals in calls not marked failed (a `| tail`, or a harness
    that kept only the text, hides the status): they taught nothing, and the next session met them untold. A
    commit hook's refusal with no commit made after it is a failure whatever the status; re-staging and committing
    again got past it, and the hook's checks are the lesson."""
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the README")
    c.bash('git add README.md && git commit -m "Docs"', PRE_COMMIT)
    c.bash('git add README.md && git commit -m "Docs"', "[main e391026] Docs\n 1 file changed")
    c.say("Committed.", end_turn=True)
    clean = Conversation(S2, cwd=CWD, start="2026-11-02T10:00:00")
    clean.user("Commit the licence")
    clean.bash('git add LICENSE && git commit -m "Licence"',
               PRE_COMMIT.replace("Failed", "Passed").replace("- files were modified by this hook\n", "")
               + "[main 77aa001] Licence\n 1 file changed")
    clean.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c, clean)
    [(_, _, summary, _)] = mined(process(), "error_fix")
    assert summary.startswith("Before `git commit` here, run `pre-commit run --all-files`"), summary
    assert "pre-commit run --all-files" in after(engram_home, S3, 'git commit -m "X"', PRE_COMMIT)


def after_refused(home: Path, session: str, tool: str, tool_input: dict) -> str:
    return run_hook("tool_failure.py", home, {
        "session_id": session, "hook_event_name": "PostToolUseFailure", "cwd": CWD, "tool_name": tool,
        "tool_input": tool_input, "tool_use_id": "toolu_r", "error": READ_LIMIT, "is_interrupt": False})


def test_a_read_refused_for_size_is_told_the_other_files_beside_it_too_big_to_read(engram_home: Path,
                                                                                   projects_dir: Path) -> None:
    """BookMinder's diary (`claude-dev-log-diary/day-*.md`): a read of one file was refused for its size, and
    later sessions' reads of others (and sub-agents sent to read them) met the same refusal untold. Right after a
    read is refused, the project's files beside it known too big are told; after a sub-agent met it, the
    project's; never the refused file itself, one in another folder, or a session's own."""
    c = Conversation(S1, cwd=CWD)
    c.user("What did we do on day two?")
    c.tool("Read", {"file_path": f"{CWD}/diary/day-002.md"}, READ_LIMIT, error=True)
    c.tool("Grep", {"pattern": "migration", "path": f"{CWD}/diary/day-002.md"}, "12: the migration")
    c.say("The migration.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    told = after_refused(engram_home, S2, "Read", {"file_path": f"{CWD}/diary/day-005.md"})
    assert "same limit on these files" in told and "`diary/day-002.md` is too big for Read" in told, told
    assert after_refused(engram_home, S2, "Read", {"file_path": f"{CWD}/diary/day-006.md"}) == ""  # once a session
    # A sub-agent's refusal does not say which file: the folder is told, never one file as if it were the one.
    told = after_refused(engram_home, S3, "Task", {"description": "Search the diary"})
    assert "Files in `diary/` are too big for Read to take whole: `day-002.md` (56293 tokens); the limit is 25000. " \
           "Search them with Grep" in told and "`diary/day-002.md` is too big" not in told, told
    assert "`day-002.md`" in after_refused(engram_home, S5, "BatchTool", {"description": "Check the logs"})
    assert after_refused(engram_home, S4, "Read", {"file_path": f"{CWD}/diary/day-002.md"}) == ""
    assert after_refused(engram_home, S4, "Read", {"file_path": f"{CWD}/docs/big.md"}) == ""
    assert after_refused(engram_home, S1, "Read", {"file_path": f"{CWD}/diary/day-007.md"}) == ""


def test_a_branch_made_under_another_name_for_a_number_the_project_has_is_told_its_branch(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box 02-13: "switch to the phase 12 branch" ran `git checkout main && git pull && git checkout -b
    feat/phase-12-mfa`, a new empty branch; phase 12 had been worked on for a day on `feat/phase-12-multi-factor`
    (every transcript line names its branch), and the user had to say so. Before a call makes a branch whose stem
    and number the project worked on under another name, that branch is told; after a checkout of a branch that
    is not there, too. Not another number (12.2), another stem (fix/…), the branch itself, or twice a session."""
    phase = Conversation(S1, cwd=CWD, start="2026-02-12T03:17:00", branch="feat/phase-12-multi-factor")
    phase.user("/gsd:execute-phase 12")
    phase.edit(f"{CWD}/apps/api/src/auth/mfa.service.ts")
    phase.bash('git commit -m "feat(12-01): MFA enrollment"', "[feat/phase-12-multi-factor 1a2b3c4] feat(12-01)")
    phase.say("Plan 01 done.", end_turn=True)
    other = Conversation(S5, cwd=CWD, start="2026-02-12T20:11:00", branch="feat/phase-12.2-encrypted-device-registry")
    other.user("Plan phase 12.2")
    other.edit(f"{CWD}/.planning/phases/12.2-encrypted-device-registry/12.2-CONTEXT.md")
    other.say("Planned.", end_turn=True)
    write_conversations(projects_dir, phase, other)
    process()
    made = before(engram_home, S2, "Bash", {"command": "git checkout main && git pull && git checkout -b "
                                                       "feat/phase-12-mfa"})
    assert ("- `feat/phase-12-mfa` is not there: this project's branch of that number is "
            "`feat/phase-12-multi-factor` (worked on 2026-02-12).") in made, made
    assert "switch to it rather than making a new one" in made, made
    assert before(engram_home, S2, "Bash", {"command": "git switch -c feat/phase-12-mfa-2"}) == ""  # once a session
    for command in ("git checkout -b feat/phase-12.1-aes-ctr", "git checkout -b fix/phase-12-typo",
                    "git checkout -b feat/phase-12-multi-factor", "git checkout feat/phase-12-multi-factor",
                    "git branch -D feat/phase-12-mfa", "git checkout -b feat/quick-015-footer"):
        assert before(engram_home, S3, "Bash", {"command": command}) == "", command
    assert before(engram_home, S1, "Bash", {"command": "git checkout -b feat/phase-12-x"}) == ""  # its own
    missed = after(engram_home, S4, "git checkout feat/phase-12-mfa",
                   "Exit code 1\nerror: pathspec 'feat/phase-12-mfa' did not match any file(s) known to git")
    assert "this project's branch of that number is `feat/phase-12-multi-factor`" in missed, missed
    # The viewer's ledger records what was told, as the project's branch.
    store = EpisodeStore(load_settings(), open_store(load_settings().db_path))
    assert ingest(store.conn, engram_home / "recollections") >= 1
    told = [json.loads(c)[0]["bite"] for (c,) in store.conn.execute(
        "SELECT content FROM injections WHERE session_id = ?", (S2,)).fetchall()]
    assert told == ["This project's branch of that number is `feat/phase-12-multi-factor`."], told
    # The session that made `feat/phase-12-mfa` by mistake left it for the project's branch: that one is still told.
    mistaken = Conversation(S6, cwd=CWD, start="2026-02-13T01:47:00", branch="feat/phase-12-mfa")
    mistaken.user("switch to the phase 12 branch")
    mistaken.bash("git checkout main && git pull && git checkout -b feat/phase-12-mfa", "Switched to a new branch")
    mistaken.say("On `feat/phase-12-mfa`.", end_turn=True)
    mistaken.branch = "feat/phase-12-multi-factor"
    mistaken.user("thats not the branch I was looking for - its called feat/phase-12-multi-factor")
    mistaken.bash("git checkout feat/phase-12-multi-factor", "Switched to branch 'feat/phase-12-multi-factor'")
    mistaken.say("Switched.", end_turn=True)
    write_conversations(projects_dir, phase, other, mistaken)
    process()
    made = before(engram_home, S3, "Bash", {"command": "git switch -c feat/phase-12-b"})
    assert "is `feat/phase-12-multi-factor`" in made, made


def after_returned(home: Path, session: str, tool: str, response: object) -> str:
    """Claude Code's PostToolUse hook of a call that returned (Engram's matcher: Task|Agent)."""
    return run_hook("tool_failure.py", home, {
        "session_id": session, "hook_event_name": "PostToolUse", "cwd": CWD, "tool_name": tool,
        "tool_input": {"description": "Search diary for uv migration"}, "tool_use_id": "toolu_t",
        "tool_response": response})


def test_a_sub_agent_that_returned_with_its_read_refused_is_told_the_folders_of_files_too_big(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder 05-25 (two sessions): the user said "Logs exceed your context size, so be smart about reading
    them", and a `Task` sent to search the diary returned "Initializing…\nError: File content (29333 tokens)
    exceeds maximum allowed tokens (25000)…" — not an error to Claude Code, so no failure hook saw it, and
    nothing was told though two diary files were known too big. Its PostToolUse (matcher Task|Agent) tells the
    folder's files known too big, in one line; not for a report that only quotes the refusal far down, nor for a
    call that is no sub-agent's."""
    c = Conversation(S1, cwd=CWD)
    c.user("What did we do on days two and four?")
    c.tool("Read", {"file_path": f"{CWD}/claude-dev-log-diary/day-002.md"}, READ_LIMIT, error=True)
    c.tool("Read", {"file_path": f"{CWD}/claude-dev-log-diary/day-004.md"},
           READ_LIMIT.replace("56293", "31882"), error=True)
    c.tool("Grep", {"pattern": "migration", "path": f"{CWD}/claude-dev-log-diary"}, "day-002.md:12: the migration")
    c.say("The migration.", end_turn=True)
    write_conversations(projects_dir, c)
    process()
    refused = "Initializing…\nError: " + READ_LIMIT.replace("56293", "29333")
    told = after_returned(engram_home, S2, "Task", refused)
    assert "Files in `claude-dev-log-diary/` are too big for Read to take whole: " in told, told
    assert "`day-002.md` (56293 tokens)" in told and "`day-004.md` (31882 tokens)" in told, told
    assert "; the limit is 25000. Search them with Grep" in told, told
    assert "a sub-agent sent to read one whole meets the same limit" in told, told
    assert told.count("(id: ") == 1, told
    # Claude Code 2's sub-agent result is an object of text blocks.
    assert "`day-004.md`" in after_returned(engram_home, S3, "Agent", {"content": [{"type": "text", "text": refused}]})
    report = "Found it. " + "The migration moved the tooling to uv. " * 12 + "(One read failed: " + READ_LIMIT + ")"
    assert after_returned(engram_home, S4, "Task", report) == ""
    assert after_returned(engram_home, S4, "Read", refused) == ""  # a read's own refusal is a failure of its own
    assert after_returned(engram_home, S4, "Task", "Searched the diary: the migration was on day 4.") == ""


DECLINED = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
            "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell "
            "you how to proceed.")


def test_a_commit_the_user_would_not_let_skip_the_hooks_is_told_before_the_next_call_that_would(
        engram_home: Path, projects_dir: Path) -> None:
    """BookMinder's user declined `SKIP=end-of-file-fixer git commit …` (04-17), `SKIP=trailing-whitespace,… git
    commit …` (05-04) and `git commit --no-verify …` (05-25), each in a session not told the last. The declined
    call is the rule: told before a call that skips the hooks in any of the ways, never before a commit that runs
    them, and not with the session's opening."""
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Commit the README")
    c.bash('git add README.md && git commit -m "Docs"', PRE_COMMIT, error=True)
    c.bash('SKIP=end-of-file-fixer git add README.md && SKIP=end-of-file-fixer git commit -m "Docs"', DECLINED,
           error=True)
    c.user("No, fix the hook configuration instead.")
    c.edit(f"{CWD}/.pre-commit-config.yaml")
    c.bash('git add README.md .pre-commit-config.yaml && git commit -m "Docs"', "[main 1a2b3c4] Docs")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "declined")
    assert kind == "preference" and summary.startswith("The user declined skipping this project's commit hooks "
                                                       "(`SKIP=end-of-file-fixer git add README.md"), summary
    assert before(engram_home, S2, "Bash", {"command": 'git commit -m "More"'}) == ""
    told = before(engram_home, S2, "Bash", {"command": 'cd /work/shop && git commit --no-verify -m "Fix CI"'})
    assert "The user declined skipping this project's commit hooks" in told, told
    assert "declined" in before(engram_home, S3, "Bash", {"command": 'SKIP=ruff git commit -m "More"'})
    assert "declined" not in digest(engram_home, S4)


def test_the_variables_a_command_came_to_be_run_with_are_told_before_it_is_run_without_them(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box started its API bare, met the database and the IPFS node elsewhere, and ended up starting it as
    `DB_HOST=192.168.133.114 … IPFS_LOCAL_API_URL=http://192.168.133.114:5001 pnpm --filter api dev`; the next three
    sessions started it bare and found it all again (uploads failing with 500). A server started in the
    background exits 0: no failure says it, the session's own runs of the command do. Told before a run without
    those variables; not before one that sets them, another command, or what a session tried and dropped."""
    c = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    c.user("Start the dev server")
    c.bash("pnpm --filter api dev", "Command running in background with ID: 1")
    c.bash("DB_HOST=192.168.133.114 REDIS_HOST=192.168.133.114 pnpm --filter api dev",
           "Command running in background with ID: 2")
    c.bash("VITE_API_URL=https://api-staging.example.com pnpm --filter web dev &", "started")
    c.bash("pnpm --filter web dev &", "started")
    c.bash("DB_HOST=192.168.133.114 REDIS_HOST=192.168.133.114 IPFS_LOCAL_API_URL=http://192.168.133.114:5001 "
           "pnpm --filter api dev 2>&1", "Command running in background with ID: 3")
    c.say("Both are up.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "settled")
    assert kind == "convention" and summary.startswith(
        "Here `pnpm --filter api dev` was last run as `DB_HOST=192.168.133.114 REDIS_HOST=192.168.133.114 "
        "IPFS_LOCAL_API_URL=http://192.168.133.114:5001 pnpm --filter api dev 2>&1` (2026-11-01), after runs "
        "without `DB_HOST`, `REDIS_HOST`, `IPFS_LOCAL_API_URL`"), summary
    told = before(engram_home, S2, "Bash", {"command": "kill $(lsof -ti:3000); pnpm --filter api dev &>/tmp/api.log &"})
    assert "IPFS_LOCAL_API_URL=http://192.168.133.114:5001" in told, told
    assert before(engram_home, S3, "Bash", {"command": "DB_HOST=10.0.0.9 pnpm --filter api dev"}) == ""
    assert before(engram_home, S3, "Bash", {"command": "pnpm --filter web dev"}) == ""


# cipher-box (2026-02-14), whole: lint-staged's tasks all passed; the commit's signing failed after them.
SIGNING_FAILED = ("Exit code 128\n[STARTED] Backing up original state...\n"
                  "[COMPLETED] Backed up original state in git stash (102783418)\n"
                  "[STARTED] Running tasks for staged files...\n[STARTED] package.json — 4 files\n"
                  "[STARTED] eslint --fix\n[STARTED] prettier --write\n[COMPLETED] prettier --write\n"
                  "[COMPLETED] eslint --fix\n[COMPLETED] Running tasks for staged files...\n"
                  "[STARTED] Applying modifications from tasks...\n[COMPLETED] Applying modifications from tasks...\n"
                  "[STARTED] Cleaning up temporary files...\n[COMPLETED] Cleaning up temporary files...\n"
                  "error: 1Password: agent returned an error\n\nfatal: failed to write commit object")


def test_a_commit_that_failed_after_its_hook_passed_teaches_nothing_about_the_hook(engram_home: Path,
                                                                                   projects_dir: Path) -> None:
    """The user unlocked 1Password and the same commit went through: no step of the session got past it, and
    lint-staged's lines above the failure are its tasks passing, not a refusal to run them first."""
    c = Conversation(S1, cwd=CWD)
    c.user("Commit it")
    c.bash('git commit -m "Auth"', SIGNING_FAILED, error=True)
    c.say("The 1Password SSH agent failed to sign the commit; trying again.")
    c.bash('git commit -m "Auth"', "[main 9f8e7d6] Auth")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    assert mined(process(), "error_fix") == []


def test_an_environment_whose_folder_is_gone_from_this_machine_is_not_told(engram_home: Path, projects_dir: Path,
                                                                          tmp_path: Path) -> None:
    """BookMinder was told to `source .uvenv/bin/activate` five minutes after its session ran `rm -rf .uvenv` (all
    four readers: noise): the processor rereads a project's environment when a session ends. With the project on
    this machine, the failure hook tells an environment only while its folder is there."""
    shop = tmp_path / "shop"
    (shop / ".uvenv" / "bin").mkdir(parents=True)
    (shop / ".uvenv" / "bin" / "activate").write_text("# activate\n")
    c = Conversation(S1, cwd=str(shop))
    c.user("Run the specs")
    for n in range(3):
        c.bash(f"source .uvenv/bin/activate && pytest specs/part{n}_spec.py", "3 passed")
    c.say("All pass.", end_turn=True)
    write_conversations(projects_dir, c)
    [(memory_id, _, _, _)] = mined(process(str(shop)), "environment")
    not_found = "Error: (eval):1: command not found: pytest"
    assert memory_id in after(engram_home, S2, "pytest specs/", not_found, cwd=str(shop))
    (shop / ".uvenv" / "bin" / "activate").unlink()
    assert after(engram_home, S3, "pytest specs/", not_found, cwd=str(shop)) == ""


# --- a failure the agent asked the user about: the answer is its lesson -----------------------------------------

# cipher-box 8a0fccaf (2026-02-13), as recorded: lint-staged's tasks passed, then the signing agent failed.
SIGNING = "\n".join([
    "Exit code 128", "[STARTED] Backing up original state...",
    "[COMPLETED] Backed up original state in git stash (3a3b54897)", "[STARTED] Running tasks for staged files...",
    "[STARTED] eslint --fix", "[COMPLETED] eslint --fix", "[COMPLETED] Running tasks for staged files...",
    "[STARTED] Cleaning up temporary files...", "[COMPLETED] Cleaning up temporary files...",
    "error: 1Password: failed to fill whole buffer", "", "fatal: failed to write commit object"])
ASKED = ("1Password SSH signing agent isn't responding. Per project conventions, unsigned commits from agent sessions "
         "are acceptable since PRs are squash-merged by GitHub. Commit without signing?")
ANSWERED = (f'User has answered your questions: "{ASKED}"="No, I\'ll fix 1Password". You can now continue with the '
            "user's answers in mind.")


def test_a_failure_the_agent_asked_the_user_about_is_told_with_the_users_answer_after_the_same_failure(
        engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD, start="2026-02-13T10:00:00")
    c.user("Commit the review fixes")
    c.bash('git add src/auth.ts && git commit -m "fix: review"', SIGNING, error=True)
    c.tool("AskUserQuestion", {"questions": [{"question": ASKED, "header": "Git signing", "multiSelect": False,
                                              "options": [{"label": "Yes, commit unsigned", "description": "…"},
                                                          {"label": "No, I'll fix 1Password", "description": "…"}]}]},
           ANSWERED)
    c.say("Got it, I'll wait for you to fix 1Password.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, kind, summary, _)] = mined(store, "answered")
    assert kind == "gotcha" and summary.startswith("When `git commit` failed this way"), summary
    assert "“Commit without signing?”" in summary and "“No, I'll fix 1Password”" in summary, summary
    told = after(engram_home, S2, 'git commit -m "docs: UAT results"', SIGNING.replace("3a3b54897", "9f8e7d6c5"))
    assert "This failed the same way on 2026-02-13" in told and "No, I'll fix 1Password" in told, told
    assert not after(engram_home, S3, 'git commit -m "docs"', PRE_COMMIT)  # another failure: not this answer
    # Never before a commit: the signing agent was locked that moment; most commits go through.
    c2 = Conversation(S5, cwd=CWD, start="2026-02-15T10:00:00")
    c2.user("Commit")
    c2.bash('git commit -m "fix: more"', SIGNING, error=True)
    c2.tool("AskUserQuestion", {"questions": [{"question": ASKED}]}, ANSWERED)
    c2.say("Waiting.", end_turn=True)
    write_conversations(projects_dir, c2)
    process()
    assert "1Password" not in before(engram_home, S6, "Bash", {"command": 'git commit -m "docs"'})


def test_a_question_not_right_after_a_failure_is_no_lesson_of_it(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD, start="2026-02-13T10:00:00")
    c.user("Commit the review fixes")
    c.bash('git commit -m "fix: review"', SIGNING, error=True)
    c.bash("git status", "On branch main")
    c.tool("AskUserQuestion", {"questions": [{"question": "Which branch should the fix go on?"}]},
           'User has answered your questions: "Which branch should the fix go on?"="main". You can now continue.')
    c.say("On main, then.", end_turn=True)
    write_conversations(projects_dir, c)
    assert mined(process(), "answered") == []


def test_a_rule_that_keeps_commits_off_a_branch_is_told_before_a_commit_on_it(
        engram_home: Path, projects_dir: Path, tmp_path: Path) -> None:
    """cipher-box 02-10: "no commits directly to main, ever!!!" — at the start of every later session it was read
    as related (nothing there touched `main`). A guard: told before a `git commit` made while the checkout is on
    `main` (its HEAD, or where this machine has no checkout the branch the session's transcript names), never
    before one on another branch, and no longer in the digest."""
    repo = tmp_path / "shop"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    first = Conversation(S1, cwd=str(repo), start="2026-02-10T22:00:00")
    first.user("sorry continue, i tohught you had pushed something to `main` earlier. no commits directly to main, "
               "ever!!!")
    first.say("Understood: never on main.", end_turn=True)
    write_conversations(projects_dir, first)
    process(str(repo))
    commit = {"command": 'git commit -m "docs: start work on todo"'}
    event = {"session_id": S2, "hook_event_name": "PreToolUse", "cwd": str(repo), "tool_name": "Bash",
             "tool_input": commit, "tool_use_id": "toolu_b"}
    told = run_hook("pretooluse.py", engram_home, event)
    assert "no commits directly to main, ever!!!" in told, told
    assert run_hook("pretooluse.py", engram_home, {**event, "session_id": S3,
                                                   "tool_input": {"command": "git status"}}) == ""
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "feat/todo"], check=True)
    assert run_hook("pretooluse.py", engram_home, {**event, "session_id": S4}) == ""  # on a feature branch
    # A worktree's `.git` is a file naming its git folder: its branch is read through it.
    worktree = tmp_path / "shop-main"
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(worktree), "-b", "main-copy"], check=True)
    from processor.hook_kit.hook_io import checkout_branch
    assert checkout_branch(str(worktree / "src")) == "main-copy" and checkout_branch(str(repo)) == "feat/todo"
    assert checkout_branch("/nonexistent/x") is None
    # Not at the session's start any more: it waits for its call.
    start = {"session_id": S5, "cwd": str(repo), "hook_event_name": "SessionStart", "source": "startup",
             "transcript_path": f"/x/{S5}.jsonl"}
    out = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / "session_start.py")],
                         input=json.dumps(start).encode(), capture_output=True, timeout=30,
                         env={"ENGRAM_HOME": str(engram_home), "PATH": "/usr/bin:/bin"}).stdout.decode()
    assert "no commits directly to main" not in out, out


# --- 6. where the last session stopped: what it left running ----------------------------------------------------


def _hours_ago(hours: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - hours * 3600))


def dev_servers_session(session: str, start: str, *, stop: str | None = None) -> Conversation:
    """cipher-box 6a77dd8a (02-16): the API, the web app and ngrok started with `run_in_background`, as Claude Code
    recorded them; `stop`: a last call that stops them."""
    c = Conversation(session, cwd=CWD, start=start)
    c.user("start the dev server - redis and postgres are running on 192.168.133.114. also going to need ngrok")
    for command, task in (("pnpm --filter api dev", "bf99c5a"), ("pnpm --filter web dev", "b272b82"),
                          ("ngrok http 3000", "bbf6fe1")):
        c.tool("Bash", {"command": command, "description": "Start it", "run_in_background": True},
               f"Command running in background with ID: {task}. Output is being written to: "
               f"/private/tmp/claude-501/-Users-michael-Code-cipher-box/tasks/{task}.output")
    c.tool("TaskOutput", {"task_id": "bf99c5a", "block": False, "timeout": 5000},
           "<retrieval_status>not_ready</retrieval_status>\n\n<task_id>bf99c5a</task_id>\n\n<status>running</status>")
    if stop is not None:
        c.bash(stop, "all ports free")
    c.say("The API is on :3000, the web app on :5173 and the tunnel is up.", end_turn=True)
    return c


def test_what_a_session_left_running_in_the_background_is_told_before_a_call_that_starts_it_again(
        engram_home: Path, projects_dir: Path) -> None:
    """cipher-box 02-16: the next session, two hours later, started the API, the web app and ngrok again on top of
    the ones left running: ngrok refused (one agent session), the API died with EADDRINUSE, Vite moved port and CORS
    failed (both readers: it needed to know). A background start is a memory; what no later call stopped is told
    before a call that starts it again — not before another package's dev server, not before a call that kills what
    runs first, not once a call stopped it, and not days later."""
    write_conversations(projects_dir, dev_servers_session(S1, _hours_ago(2)))
    store = process()
    started = [summary for _, _, summary, _ in mined(store, "signal")]
    assert "Started in the background (task `bf99c5a`): `pnpm --filter api dev`" in started, started
    told = before(engram_home, S2, "Bash", {"command": "pnpm --filter api dev", "run_in_background": True})
    assert "started `pnpm --filter api dev`, `pnpm --filter web dev` and `ngrok http 3000` in the background and " \
           "never stopped them: they may still be running, holding their ports. Look (`lsof -i :PORT`, `ps`) before " \
           "starting them again." in told, told
    assert before(engram_home, S3, "Bash", {"command": "DB_HOST=192.168.133.114 ngrok http 3000 2>&1"}) != ""
    assert before(engram_home, S3, "Bash", {"command": "pnpm --filter @cipherbox/mock-ipns-routing dev &>/tmp/m.log &"}
                  ) == ""  # another package's dev server
    assert before(engram_home, S3, "Bash", {
        "command": "kill $(lsof -ti:3000) 2>/dev/null; sleep 1; pnpm --filter api dev &>/tmp/api-dev.log &"}) == ""
    assert before(engram_home, S1, "Bash", {"command": "pnpm --filter api dev"}) == ""  # its own: it knows

    # Stopped by a later call (any kill: which process it hit is not known), or left days ago: nothing to tell.
    write_conversations(projects_dir, dev_servers_session(S1, _hours_ago(2)), dev_servers_session(
        S4, _hours_ago(1), stop="lsof -ti :3000 :5173 :5174 2>/dev/null | sort -u | xargs kill -9 2>/dev/null"))
    process()
    assert before(engram_home, S5, "Bash", {"command": "pnpm --filter api dev"}) == ""


def test_what_a_session_left_running_days_ago_is_not_told(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, dev_servers_session(S1, _hours_ago(55)))
    process()
    assert before(engram_home, S2, "Bash", {"command": "pnpm --filter api dev"}) == ""


def test_a_task_stop_naming_a_background_task_stops_that_one_only(engram_home: Path, projects_dir: Path) -> None:
    c = dev_servers_session(S1, _hours_ago(3))
    c.tool("TaskStop", {"task_id": "bf99c5a"}, '{"message":"Successfully stopped task: bf99c5a (pnpm --filter api '
                                               'dev)","task_id":"bf99c5a","task_type":"local_bash"}')
    write_conversations(projects_dir, c)
    process()
    assert before(engram_home, S2, "Bash", {"command": "pnpm --filter api dev"}) == ""
    told = before(engram_home, S2, "Bash", {"command": "pnpm --filter web dev"})
    assert "started `pnpm --filter web dev` and `ngrok http 3000` in the background" in told, told


def test_a_program_not_found_for_a_job_is_told_the_one_the_project_runs_for_it(engram_home: Path,
                                                                               projects_dir: Path) -> None:
    """cipher-box 02-16: `pnpm --filter web exec biome check …` and `pnpm biome check …` met 'Command "biome" not
    found', then an `npx biome check` checked nothing; the project lints with ESLint (`npx eslint --fix …` ran
    clean on 02-12; both labellers: it needed to know). Right after a linter (formatter, test runner) the
    project's sessions never ran is not found: the one they ran for that job."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Fix the lint errors in the page objects")
    first.bash("npx eslint --fix tests/e2e/page-objects/file-browser/context-menu.page.ts 2>&1", "")
    first.say("Fixed.", end_turn=True)
    write_conversations(projects_dir, first)
    process()
    told = after(engram_home, S2, "pnpm --filter web exec biome check apps/web/src/routes/SettingsPage.tsx 2>&1",
                 "Exit code 254\nundefined\n/work/shop/apps/web:\n\u2009ERR_PNPM_RECURSIVE_EXEC_FIRST_FAIL\u2009 "
                 'Command "biome" not found')
    assert "This project lints with `eslint`: `npx eslint --fix tests/e2e/page-objects/file-browser/" \
           "context-menu.page.ts 2>&1` ran clean here (2026-11-01); its sessions never ran `biome`." in told, told
    assert before(engram_home, S3, "Bash", {"command": "npx biome check src/"}) == ""  # only after it is not found
    assert "eslint" not in after(engram_home, S3, "npx prettier --check src", "zsh: command not found: prettier")


def test_a_local_override_a_session_left_is_told_before_a_call_starts_what_reads_it(engram_home: Path,
                                                                                  projects_dir: Path) -> None:
    """cipher-box 02-13: a session wrote `apps/web/.env.local` ("# Override API to staging") and kept it out of its
    commit; two sessions later the local web app talked to staging and the user could not log in until the agent
    found the file (both readers: it needed to know). Before a call that starts what the sessions started in the
    background in that folder (`pnpm --filter web dev`): the override, as written. Not before the API's server,
    and not once a session wrote it again (the newest is told), nor from a session long past."""
    first = Conversation(S1, cwd=CWD, start="2026-11-01T10:00:00")
    first.user("Point the local web app at staging")
    first.tool("Write", {"file_path": f"{CWD}/apps/web/.env.local",
                         "content": "# Override API to staging\nVITE_API_URL=https://api-staging.cipherbox.cc\n"},
               f"File created successfully at: {CWD}/apps/web/.env.local")
    for command in ("pnpm --filter web dev", "pnpm --filter api dev"):
        first.tool("Bash", {"command": command, "run_in_background": True},
                   "Command running in background with ID: b66a079. Output is being written to: /tmp/b66a079.output")
    first.bash("git reset HEAD apps/web/.env.local")
    first.say("The web app now talks to staging.", end_turn=True)
    write_conversations(projects_dir, first)
    process()
    told = before(engram_home, S2, "Bash", {"command": "pnpm --filter web dev", "run_in_background": True})
    assert "A session here wrote `apps/web/.env.local` (2026-11-01 10:00 UTC) and left it: “# Override API to " \
           "staging VITE_API_URL=https://api-staging.cipherbox.cc”. What starts in `apps/web` reads it." in told, told
    assert "env.local" not in before(engram_home, S3, "Bash", {"command": "pnpm --filter api dev"})
    again = Conversation(S4, cwd=CWD, start="2026-11-02T10:00:00")
    again.user("Back to the local API")
    again.tool("Write", {"file_path": f"{CWD}/apps/web/.env.local",
                         "content": "# Local dev - use localhost API\nVITE_API_URL=http://localhost:3000\n"},
               f"The file {CWD}/apps/web/.env.local has been overwritten successfully.")
    again.say("Done.", end_turn=True)
    write_conversations(projects_dir, first, again)
    process()
    told = before(engram_home, S5, "Bash", {"command": "pnpm --filter web dev"})
    assert "“# Local dev - use localhost API VITE_API_URL=http://localhost:3000”" in told and "staging" not in told
    later = []
    for n in range(3):  # three sessions that did not touch it: one written that long ago is settled, not news
        c = Conversation(f"35353535-0000-4000-8000-0000000005{n:02d}", cwd=CWD, start=f"2026-11-0{n + 3}T10:00:00")
        c.user("Fix the upload bug")
        c.bash("git status", "On branch main")
        c.say("Fixed.", end_turn=True)
        later.append(c)
    write_conversations(projects_dir, first, again, *later)
    process()
    assert "env.local" not in before(engram_home, S6, "Bash", {"command": "pnpm --filter web dev"})


@pytest.mark.parametrize(("path", "override"), [
    ("/Users/michael/Code/cipher-box/apps/web/.env.local", True), ("apps/web/.env.development.local", True),
    (".claude/settings.local.json", True), ("docker-compose.override.yml", True),
    ("/Users/michael/Code/cipher-box/apps/api/.env", False),  # the settings themselves: a change is the project's
    ("apps/web/.env.production", False), ("src/local.ts", False),
])
def test_which_files_are_local_overrides(path: str, override: bool) -> None:
    from processor.capture.signals import is_override
    assert is_override(path) is override
