"""Homes for the tests of fixes told everywhere (issue 32): Engram homes as machines, each with its own git clone of
one repository and its own Codex CLI folder; sessions that learn a fix, written as Claude Code and the Codex CLI
write them; and the real hooks, run as subprocesses, at every moment a fix may be told."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.testbed.agent_transcripts import Rollout
from bench.testbed.transcripts import Conversation, write_conversations
from processor.memory.episode_store import EpisodeStore
from processor.recall.recollections import RecollectionWriter
from processor.share import commands
from processor.store import open_store
from processor.store import share as share_sql
from processor.store.share import ShareState
from tests.conftest import REPO
from tests.support.share_fixtures import Machine, SharedSetup, capture, git_clone

REMOTES = ("git@github.com:Org/App.git", "https://alice@github.com/Org/App", "ssh://git@GitHub.com:22/Org/App.git")


def import_error(root: str) -> str:
    return (f"ImportError while importing test module '{root}/tests/test_app.py'.\n"
            "Hint: make sure your test modules/packages have valid Python names.\nTraceback:\n"
            "/usr/lib/python3.12/importlib/__init__.py:90: in import_module\n"
            "    return _bootstrap._gcd_import(name[level:], package, level)\n"
            "tests/test_app.py:1: in <module>\n    from app import main\n"
            "E   ModuleNotFoundError: No module named 'app'\n")


RUFF_MISSING = "bash: line 1: ruff: command not found\n"


def sid(tag: str) -> str:
    """A session id as the agents make them (Codex's rollouts are found by it)."""
    return "5e55" + tag.encode().hex().ljust(4, "0")[:4] + "-0000-4000-8000-" + tag.encode().hex().ljust(12, "0")[:12]


@dataclass
class Home:
    """One machine of the test: its Engram home, its clone of the repository, its Codex CLI folder."""

    machine: Machine
    repo: str
    codex: Path

    @property
    def settings(self):
        return self.machine.settings


def home(shared: SharedSetup, tmp_path: Path, name: str, role: str, remote: str | None) -> Home:
    """A machine (an Engram home syncing as `role`) with its clone of the repository (none: `remote` None; its
    path is where a clone may appear later)."""
    codex = tmp_path / f"codex-{name}"
    machine = shared.machine(name, role, extra=f'codex_home = "{codex}"\n')
    folder = tmp_path / name / "src" / "app"
    return Home(machine, git_clone(folder, remote) if remote else str(folder), codex)


def team_homes(shared: SharedSetup, tmp_path: Path, *, teammate_clone: bool = True) -> tuple[Home, Home, Home]:
    """A and B (alice's laptop and desktop) and C (bob's machine), alice and bob in team "backend", alice's project
    shared with it; each machine has worked in its clone of the repository before (C has none unless
    `teammate_clone`)."""
    shared.init()
    alice, bob = shared.person("alice"), shared.person("bob")
    shared.team("backend", alice, bob)
    homes = (home(shared, tmp_path, "laptop", alice, REMOTES[0]), home(shared, tmp_path, "desktop", alice, REMOTES[1]),
             home(shared, tmp_path, "bobs", bob, REMOTES[2] if teammate_clone else None))
    for where, session_id in zip(homes, (sid("a0"), sid("b0"), sid("c0")), strict=True):
        if Path(where.repo).exists():
            earlier_session(where, session_id)
            capture(where.machine)
    commands.share_project(homes[0].settings, homes[0].repo, "backend")
    return homes


def earlier_session(where: Home, session_id: str) -> None:
    """A session in the clone before any fix arrives: the project is one this machine works on."""
    c = Conversation(session_id, cwd=where.repo, start="2026-11-19T09:00:00")
    c.user("What does the app package do?")
    c.say("It serves the storefront's API.", end_turn=True)
    write_conversations(where.machine.projects, c)


def claude_fix(where: Home, session_id: str, start: str) -> None:
    """`pytest` cannot import the package; `pip install -e .`; `pytest` passes."""
    c = Conversation(session_id, cwd=where.repo, start=start)
    c.user("Run the test suite")
    c.bash("pytest", import_error(where.repo), error=True)
    c.bash("pip install -e .", "Successfully built app\nSuccessfully installed app-0.1.0")
    c.bash("pytest", "============ 3 passed in 0.12s ============")
    c.say("The suite passes.", end_turn=True)
    write_conversations(where.machine.projects, c)


def codex_fix(where: Home, session_id: str, start: str) -> None:
    """`ruff` is not found; installing the dev extras brings it."""
    r = Rollout(where.codex, cwd=where.repo, session_id=session_id, start=start)
    r.turn()
    r.environment()
    r.prompt("Lint the code")
    r.exec_command("ruff check .", RUFF_MISSING, exit_code=127)
    r.exec_command("pip install -e '.[dev]'", "Successfully installed pytest-8.3.3 ruff-0.6.9")
    r.exec_command("ruff check .", "All checks passed!")
    r.answer("Lint is clean.")
    r.done()
    r.write()


def hook(where: Home, script: str, event: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / script), *args],
                          input=json.dumps(event).encode(), capture_output=True, timeout=60,
                          env={"ENGRAM_HOME": str(where.machine.home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.decode()


def told_ids(out: str, ids: set[str]) -> set[str]:
    """Which of these memories the hook's output tells."""
    if not out:
        return set()
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    return {memory_id for memory_id in ids if memory_id in context}


def before(where: Home, session_id: str, command: str, ids: set[str]) -> set[str]:
    return told_ids(hook(where, "pretooluse.py", {
        "session_id": session_id, "hook_event_name": "PreToolUse", "cwd": where.repo, "tool_name": "Bash",
        "tool_input": {"command": command}}), ids)


def after_claude_failure(where: Home, session_id: str, command: str, error: str, ids: set[str]) -> set[str]:
    return told_ids(hook(where, "tool_failure.py", {
        "session_id": session_id, "hook_event_name": "PostToolUseFailure", "cwd": where.repo, "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": "toolu_01", "error": error, "is_interrupt": False}), ids)


def after_codex_failure(where: Home, session_id: str, command: str, output: str, ids: set[str]) -> set[str]:
    """Codex's PostToolUse of a shell call that exited 127, as its rollout records it."""
    rollout = Rollout(where.codex / "live", cwd=where.repo, session_id=session_id, start="2026-11-21T09:00:00")
    call_id = rollout.exec_command(command, output, exit_code=127)
    path = rollout.write()
    return told_ids(hook(where, "tool_failure.py", {
        "session_id": session_id, "hook_event_name": "PostToolUse", "cwd": where.repo, "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": call_id, "transcript_path": str(path),
        "tool_response": output}, "codex"), ids)


def at_prompt(where: Home, session_id: str, prompt: str, ids: set[str]) -> set[str]:
    """The bites the processor picks for a prompt (what the first tool call's hook tells with it)."""
    settings = where.settings
    store = EpisodeStore(settings, open_store(settings.db_path))
    try:
        path = RecollectionWriter(settings).write(store, session_id, f"{session_id}-prompt", prompt, where.repo)
    finally:
        store.conn.close()
    assert path is not None
    return {b["id"] for b in json.loads(path.read_text())["bites"]} & ids


def session_begins(where: Home, tag: str) -> None:
    """A new session's first prompt, processed: the processor brings the project's lesson index up to date with
    what this machine learned since (as every prompt does)."""
    at_prompt(where, sid(tag), "Carry on with the release checklist", set())


def at_start(where: Home, ids: set[str]) -> set[str]:
    return told_ids(hook(where, "session_start.py", {"session_id": sid("st"), "hook_event_name": "SessionStart",
                                                     "cwd": where.repo, "source": "startup"}), ids)


def fixes_of(where: Home) -> dict[str, str]:
    """The active error fixes this machine holds: id → summary."""
    conn = open_store(where.settings.db_path)
    try:
        return dict(conn.execute("SELECT e.id, e.summary FROM episodes e JOIN memory_origins o ON o.episode_id = e.id "
                                 "WHERE o.miner = 'error_fix' AND e.status = 'active'").fetchall())
    finally:
        conn.close()


def what_is_told(where: Home, tag: str, ids: set[str]) -> dict[str, set[str]]:
    """Every moment of the issue, each in a new session (each memory is told once a session); a prompt first, as a
    session begins (on A, its recollection brings the project's lesson index up to date)."""
    return {
        "at a prompt about it": at_prompt(where, sid(f"{tag}6"), "pytest fails with No module named app when it "
                                                                 "imports the test module, what fixes that?", ids),
        "right after pytest failed": after_claude_failure(where, sid(f"{tag}1"), "pytest", import_error(where.repo),
                                                          ids),
        "right after ruff was not found (Codex)": after_codex_failure(where, sid(f"{tag}2"), "ruff check src",
                                                                      RUFF_MISSING, ids),
        "before pytest (met in two sessions)": before(where, sid(f"{tag}3"), "pytest -q", ids),
        "before a call that applies the fix": before(where, sid(f"{tag}4"), "pip install -e . && pytest", ids),
        "before ruff (met once)": before(where, sid(f"{tag}5"), "ruff check .", ids),
        "at session start": at_start(where, ids),
    }


def share_state(where: Home) -> ShareState:
    conn = open_store(where.settings.db_path)
    try:
        return share_sql.state(conn)
    finally:
        conn.close()

