"""The same error never twice: a failure an earlier session got past is met with what fixed it.

Real transcripts (Claude Code's line format), the real processor pass (capture, episodes), the real embedding
model, and the real hooks as subprocesses: PostToolUseFailure right after the failure, PreToolUse before the call
once the failure has recurred in two sessions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.testbed.transcripts import Conversation, write_conversations
from processor.config import load_settings
from processor.memory.episode_store import EpisodeStore
from processor.recall.recollections import RecollectionWriter
from processor.service.run_loop import Processor
from processor.store import failures as failures_sql
from processor.store import open_store
from tests.conftest import REPO

CWD = "/work/shop"  # not on this machine: the project is the cwd itself
S1, S2, S3 = (f"22222222-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))


def no_upstream(branch: str) -> str:
    return (f"fatal: The current branch {branch} has no upstream branch.\nTo push the current branch and set the "
            f"remote as upstream, use\n\n    git push --set-upstream origin {branch}\n")


def push_session(session_id: str, branch: str, start: str) -> Conversation:
    c = Conversation(session_id, cwd=CWD, start=start)
    c.user(f"Push the {branch} work")
    c.bash(f"git checkout -b {branch}", f"Switched to a new branch '{branch}'")
    c.bash("git push", no_upstream(branch), error=True)
    c.bash(f"git push --set-upstream origin {branch}", f"branch '{branch}' set up to track 'origin/{branch}'.")
    c.say("Pushed.", end_turn=True)
    return c


def process() -> EpisodeStore:
    settings = load_settings()
    Processor(settings).run_once(None)
    store = EpisodeStore(settings, open_store(settings.db_path))
    RecollectionWriter(settings).lessons.refresh(store.conn, CWD, CWD)  # as the next user message would
    return store


def run_hook(script: str, home: Path, event: dict) -> str:
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / script)],
                          input=json.dumps(event).encode(), capture_output=True, timeout=30,
                          env={"ENGRAM_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.decode()


def failed(home: Path, session_id: str, command: str, error: str, tool: str = "Bash") -> str:
    key = "command" if tool == "Bash" else "file_path"
    return run_hook("tool_failure.py", home, {
        "session_id": session_id, "hook_event_name": "PostToolUseFailure", "cwd": CWD, "tool_name": tool,
        "tool_input": {key: command}, "tool_use_id": "toolu_x", "error": error, "is_interrupt": False})


def before(home: Path, session_id: str, command: str) -> str:
    return run_hook("pretooluse.py", home, {"session_id": session_id, "hook_event_name": "PreToolUse", "cwd": CWD,
                                            "tool_name": "Bash", "tool_input": {"command": command}})


def told(out: str) -> str:
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def fixes(store: EpisodeStore) -> list[tuple]:
    return store.conn.execute("SELECT e.id, e.kind, e.summary, e.full_content FROM episodes e JOIN memory_origins o "
                              "ON o.episode_id = e.id WHERE o.miner = 'error_fix' AND e.status = 'active'").fetchall()


def test_the_same_failure_gets_its_fix_right_after(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, push_session(S1, "feat-login", "2026-11-01T10:00:00"))
    store = process()
    [(fix_id, kind, summary, content)] = fixes(store)
    # No diagnosis was said: the error and the call that worked are the lesson.
    assert kind == "gotcha" and "git push --set-upstream origin feat-login" in summary
    assert "has no upstream branch" in content
    out = failed(engram_home, S2, "git push", no_upstream("feat-billing"))
    assert fix_id in told(out) and "what fixed it: `git push --set-upstream origin feat-login`" in told(out)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "PostToolUseFailure"
    assert "permissionDecision" not in out
    # Once a session: the agent has it in its context now.
    assert failed(engram_home, S2, "git push", no_upstream("feat-billing")) == ""
    # Met in one session only: not yet told before the call.
    assert before(engram_home, S3, "git push") == ""
    # The session that learned it has it already.
    assert failed(engram_home, S1, "git push", no_upstream("feat-x")) == ""


def test_a_failure_that_recurs_is_told_before_the_call(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, push_session(S1, "feat-login", "2026-11-01T10:00:00"),
          push_session(S2, "feat-cart", "2026-11-03T10:00:00"))
    store = process()
    assert len(fixes(store)) == 1  # one memory per way of failing, however many sessions met it
    [row] = [r for r in failures_sql.with_memories(store.conn, CWD)]
    assert set(row.sessions) == {S1, S2} and row.fail_key == "fail:git"
    # a call that already does what fixed it is not told it
    assert before(engram_home, S3, "git push --set-upstream origin feat-y") == ""
    out = before(engram_home, S3, "git push")
    assert "git push --set-upstream origin" in told(out)
    assert before(engram_home, S3, "git push") == ""  # once a session, whichever hook told it
    assert failed(engram_home, S3, "git push", no_upstream("feat-y")) == ""


def test_a_flaky_rerun_and_an_unfixed_failure_teach_nothing(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Run the tests and deploy")
    c.bash("npm test", "Error: connect ECONNREFUSED 127.0.0.1:5432 (the database is starting)", error=True)
    c.bash("npm test", "42 passing")  # the same command again, nothing changed: flaky
    c.bash("make deploy", "make: *** No rule to make target 'deploy'.  Stop.", error=True)
    c.say("There is no deploy target; I'll ask the user.", end_turn=True)  # never fixed
    c.user("Stop there")
    c.bash("git commit -am wip", "The user doesn't want to proceed with this tool use.", error=True)  # declined
    c.bash("git commit -am wip2", "[main 1234567] wip2")
    write_conversations(projects_dir, c)
    store = process()
    assert fixes(store) == []
    assert failed(engram_home, S2, "npm test", "Error: connect ECONNREFUSED 127.0.0.1:5433") == ""
    assert failed(engram_home, S2, "make deploy", "make: *** No rule to make target 'deploy'.  Stop.") == ""
    # Counted all the same: an unfixed failure recurs, and a later fix finds its count.
    keys = {row.fail_key for row in failures_sql.project_failures(store.conn, CWD)}
    assert keys == {"fail:npm", "fail:make"}


def test_the_same_command_failing_for_different_reasons_gets_each_its_own_fix(engram_home: Path,
                                                                              projects_dir: Path) -> None:
    hook_says = ("trim trailing whitespace.................................................Failed\n"
                 "- hook id: trailing-whitespace\n- exit code: 1\n- files were modified by this hook\n\n"
                 "Fixing README.md\n")
    who = "Author identity unknown\n\n*** Please tell me who you are.\n\nfatal: unable to auto-detect email address"
    c = Conversation(S1, cwd=CWD)
    c.user("Commit the docs")
    c.bash('git commit -m "Docs"', hook_says, error=True)
    c.bash("git add README.md")
    c.bash('git commit -m "Docs"', "[main 1a2b3c4] Docs")
    c.user("Commit the config on the new machine")
    c.bash('git commit -m "Config"', who, error=True)
    c.bash('git config user.email "dev@example.com"')
    c.bash('git commit -m "Config"', "[main 5d6e7f8] Config")
    c.say("Committed.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    assert len(fixes(store)) == 2
    # A commit hook's refusal teaches the step that avoids it (what the hook runs), never the retry that got past it.
    lesson = ("Before `git commit` here, run `pre-commit run --all-files` and stage what it changes: its pre-commit "
              "hook's `trailing-whitespace` rewrites files and stops the commit.")
    assert any(summary.startswith(lesson) for _, _, summary, _ in fixes(store)), fixes(store)
    hook = told(failed(engram_home, S2, 'git commit -m "Tests"', hook_says.replace("README.md", "setup.py")))
    # Said once: the memory's own words name the step; not the checks it names (the refusal just read names the
    # ones that failed now: BookMinder's said `end-of-file-fixer` when `ruff` refused).
    step = "Before `git commit` here, run `pre-commit run --all-files` and stage what it changes."
    assert f"This failed the same way on 2026-11-01: {step}" in hook and hook.count("pre-commit run") == 1, hook
    assert "trailing-whitespace" not in hook, hook
    assert "git add README.md" not in hook and "git config" not in hook, hook
    identity = told(failed(engram_home, S2, 'git commit -m "X"', who))
    assert "git config user.email" in identity and "git add" not in identity


def test_thousands_of_failures_of_one_command_are_one_signature_and_one_memory(engram_home: Path,
                                                                              projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD, step_seconds=1)
    c.user("Run the specs until they pass")
    for n in range(1500):
        c.bash(f"pytest specs/test_{n}.py", f"(eval):{n}: command not found: pytest", error=True)
    c.bash("source .venv/bin/activate && pytest specs/", "3 passed")
    c.say("Green.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    rows = failures_sql.project_failures(store.conn, CWD)
    assert len(rows) == 1 and rows[0].memory_id is not None
    [(_, _, summary, _)] = fixes(store)
    assert "source .venv/bin/activate" in summary


def test_a_secret_in_an_error_is_redacted_before_it_is_stored_or_told(engram_home: Path, projects_dir: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    c = Conversation(S1, cwd=CWD)
    c.user("Publish the package")
    c.bash("npm publish", f"npm ERR! code E401\nnpm ERR! Unable to authenticate, token {token} is expired", error=True)
    c.bash("npm login --registry https://registry.npmjs.org && npm publish", "+ shop@1.0.0")
    write_conversations(projects_dir, c)
    store = process()
    assert fixes(store)
    out = failed(engram_home, S2, "npm publish", f"npm ERR! code E401\nnpm ERR! Unable to authenticate, token {token} "
                                                 "is expired")
    assert "npm login" in told(out) and token not in out
    index = next((engram_home / "recollections" / "lessons").iterdir()).read_text()
    assert token not in index
    assert not [p for p in engram_home.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


def test_a_failure_in_another_language_is_matched_by_its_words(engram_home: Path, projects_dir: Path) -> None:
    error = "Fehler: Die Datei /srv/app/config.yml konnte nicht gelesen werden, Zugriff verweigert"
    c = Conversation(S1, cwd=CWD)
    c.user("Starte die App")
    c.bash("./start.sh", error, error=True)
    c.bash("sudo ./start.sh", "gestartet")
    write_conversations(projects_dir, c)
    process()
    other = error.replace("/srv/app/config.yml", "/srv/app/secrets.yml")
    assert "`sudo ./start.sh`" in told(failed(engram_home, S2, "./start.sh", other))


def test_an_interrupted_or_declined_call_is_not_a_failure(engram_home: Path, projects_dir: Path) -> None:
    write_conversations(projects_dir, push_session(S1, "feat-login", "2026-11-01T10:00:00"))
    process()
    out = run_hook("tool_failure.py", engram_home, {
        "session_id": S2, "hook_event_name": "PostToolUseFailure", "cwd": CWD, "tool_name": "Bash",
        "tool_input": {"command": "git push"}, "tool_use_id": "t", "error": no_upstream("x"), "is_interrupt": True})
    assert out == ""
    assert failed(engram_home, S2, "git push", "The user doesn't want to proceed with this tool use.") == ""


def test_a_recipe_assembled_through_failures_is_told_before_the_next_run(engram_home: Path,
                                                                         projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Write the first API test and run it")
    c.write(f"{CWD}/tests/test_api.py")
    c.bash("pytest tests/test_api.py", "(eval):1: command not found: pytest", error=True)
    c.say("The test tools live in the project's `.venv`, so it must be activated first.")
    c.bash("source .venv/bin/activate && pytest tests/test_api.py",
           "ImportError while importing test module\nModuleNotFoundError: No module named 'shop'", error=True)
    c.say("The `shop` package must be installed in editable mode before its tests can import it.")
    c.bash("source .venv/bin/activate && pip install -e .", "Successfully installed shop-0.1")
    c.bash("source .venv/bin/activate && pytest tests/test_api.py", "1 passed in 0.02s")
    c.say("The API test passes.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(recipe_id, summary)] = store.conn.execute(
        "SELECT e.id, e.summary FROM episodes e JOIN memory_origins o ON o.episode_id = e.id "
        "WHERE o.miner = 'recipe'").fetchall()
    assert summary.startswith("To run `pytest` here:") and "editable mode" in summary and "activated" in summary
    out = before(engram_home, S2, "pytest tests/test_cart.py")
    assert recipe_id in told(out) and "ran clean" in told(out)
    # Reading a test file is not running the tests: the recipe is filed under the command only.
    read = run_hook("pretooluse.py", engram_home, {"session_id": S3, "hook_event_name": "PreToolUse", "cwd": CWD,
                                                   "tool_name": "Read",
                                                   "tool_input": {"file_path": f"{CWD}/tests/test_cart.py"}})
    assert recipe_id not in read


def test_reruns_after_fixing_the_code_are_the_work_not_a_recipe(engram_home: Path, projects_dir: Path) -> None:
    """A type checker failing one way, then another, then clean, with only the code edited in between: each go
    was the same command. Nothing about how to run it here was learned."""
    c = Conversation(S1, cwd=CWD)
    c.user("Fix the type errors")
    c.bash("uv run pyright", f"{CWD}/shop/cart.py:18:4 - error: Type \"None\" is not assignable to \"int\"",
           error=True)
    c.edit(f"{CWD}/shop/cart.py")
    c.bash("uv run pyright", f"{CWD}/shop/cart.py:40:9 - error: Cannot access attribute \"total\" for class "
           "\"Order\"", error=True)
    c.edit(f"{CWD}/shop/cart.py")
    c.bash("uv run pyright", "0 errors, 0 warnings, 0 informations")
    c.say("Pyright is clean.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    assert store.conn.execute("SELECT count(*) FROM memory_origins WHERE miner = 'recipe'").fetchone()[0] == 0


def codex_rollout(path: Path, call_id: str, output: str, *, status: str) -> None:
    """The lines a Codex rollout holds for a finished shell call when its PostToolUse hook runs."""
    code = 128 if status == "failed" else 0
    lines = [{"type": "response_item", "payload": {"type": "function_call", "name": "exec_command",
                                                   "arguments": '{"cmd": "git push"}', "call_id": call_id}},
             {"type": "event_msg", "payload": {"type": "item_completed", "item": {
                 "type": "CommandExecution", "id": call_id, "status": status, "aggregated_output": output}}},
             {"type": "response_item", "payload": {"type": "function_call_output", "call_id": call_id,
                                                   "output": f"Process exited with code {code}\nOutput:\n{output}"}}]
    path.write_text("x" * 300_000 + "\n" + "".join(json.dumps(line) + "\n" for line in lines))


def test_codex_and_gemini_get_the_fix_right_after_the_same_failure(engram_home: Path, projects_dir: Path,
                                                                   tmp_path: Path) -> None:
    """Neither has an event for a failed call alone: Codex's PostToolUse reads the call's exit status from its
    rollout (its tool_response is the output only); Gemini's AfterTool (pretooluse.py) reads ``Exit Code: N``."""
    write_conversations(projects_dir, push_session(S1, "feat-login", "2026-11-01T10:00:00"))
    process()
    rollout = tmp_path / "rollout.jsonl"
    codex_event = {"session_id": S2, "hook_event_name": "PostToolUse", "cwd": CWD, "tool_name": "Bash",
                   "tool_input": {"command": "git push"}, "tool_use_id": "call_7", "transcript_path": str(rollout),
                   "tool_response": no_upstream("feat-cart")}
    codex_rollout(rollout, "call_7", no_upstream("feat-cart"), status="completed")
    assert run_hook("tool_failure.py", engram_home, codex_event) == ""  # exited 0: not a failure
    codex_rollout(rollout, "call_7", no_upstream("feat-cart"), status="failed")
    assert run_hook("tool_failure.py", engram_home, {**codex_event, "tool_use_id": "call_8"}) == ""  # not its call
    out = run_hook("tool_failure.py", engram_home, codex_event)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert "what fixed it: `git push --set-upstream origin feat-login`" in told(out)

    content = "<untrusted_context>\nOutput: {}\nExit Code: {}\nProcess Group PGID: 4242\n</untrusted_context>"
    gemini_event = {"session_id": S3, "hook_event_name": "AfterTool", "cwd": CWD, "tool_name": "run_shell_command",
                    "tool_input": {"command": "git push"},
                    "tool_response": {"llmContent": content.format(no_upstream("feat-cart"), 0)}}
    assert run_hook("pretooluse.py", engram_home, gemini_event) == ""
    gemini_event["tool_response"] = {"llmContent": content.format(no_upstream("feat-cart"), 128)}
    out = run_hook("pretooluse.py", engram_home, gemini_event)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "AfterTool"
    assert "This failed the same way" in told(out) and "git push --set-upstream origin feat-login" in told(out)
    assert run_hook("pretooluse.py", engram_home, gemini_event) == ""  # once a session


def test_a_fix_is_told_without_a_cd_into_the_project_inside_it(engram_home: Path, projects_dir: Path) -> None:
    c = Conversation(S1, cwd=CWD)
    c.user("Make the virtual environment")
    c.bash("uv venv", "(eval):1: command not found: uv", error=True)
    c.bash(f'export PATH="$HOME/.local/bin:$PATH" && cd {CWD} && uv venv', "Creating virtual environment at: .venv")
    c.say("Done.", end_turn=True)
    write_conversations(projects_dir, c)
    store = process()
    [(_, _, summary, _)] = fixes(store)
    assert 'What fixed it: `export PATH="$HOME/.local/bin:$PATH" && uv venv`.' in summary, summary
    hook = told(failed(engram_home, S2, "uv venv", "(eval):1: command not found: uv"))
    assert f"cd {CWD}" not in hook and 'export PATH="$HOME/.local/bin:$PATH" && uv venv' in hook, hook
