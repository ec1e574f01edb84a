"""One project wherever its sessions ran, with the real Claude Code CLI: a fix learned in a worktree that was
removed before Engram read its session is told in a later session in another worktree and in a clone.

The bundled Claude Code CLI against a fake Messages API on 127.0.0.1, Engram installed in a temporary HOME; the
repository, its worktrees and its clone made and removed with git itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.testbed.claude_cli import ClaudeCLI, EngramClaude
from bench.testbed.fake_anthropic import Reply
from bench.testbed.git_repos import add_worktree, clone, git, remove_worktree
from tests.e2e.test_claude_cli_told import TOOL, bash, told  # the billing tool that fails without its config

CLI = ClaudeCLI.bundled()
pytestmark = pytest.mark.skipif(
    CLI is None,
    reason="the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)")

REMOTE = "git@github.com:Org/Billing.git"


def told_at_the_call(world: EngramClaude, prompt: str, cwd: Path) -> str:
    """Run the billing tool the failing way in `cwd`; what Engram told with that call: before it (the PreToolUse
    hook, once the failure recurred across sessions) or right after its failure. The model's first
    call waits for the processor's recollection of the prompt, as a real model's thinking time would (it names
    the session's project; before it, a hook names the project from the folder alone)."""
    before = len(world.server.conversation)
    world.ask(prompt, [world.after_recollection(prompt, bash("python3 tool.py")), Reply.text("Noted.")], cwd=cwd)
    after_failure = world.server.conversation[before + 1]
    return told([t for _, t in after_failure.texts()])


def test_a_fix_from_a_removed_worktree_is_told_in_another_worktree_and_in_a_clone(tmp_path: Path) -> None:
    assert CLI is not None
    started = time.monotonic()
    with EngramClaude(tmp_path, CLI, repo_name="billing") as world:
        world.install()
        (world.repo / "tool.py").write_text(TOOL)
        git(world.repo, "checkout", "-q", "-b", "main")
        git(world.repo, "add", "tool.py")
        git(world.repo, "commit", "-q", "-m", "the billing tool")
        git(world.repo, "remote", "add", "origin", REMOTE)

        # Session 1, in a worktree, while Engram is not running: the tool fails, a changed command gets past it.
        first = add_worktree(world.repo, world.repo.parent / "billing-worktrees" / "config", "fix-config")
        world.ask("Run the billing tool", [bash("python3 tool.py"), bash("python3 tool.py --config defaults.toml"),
                                           Reply.text("It runs with the defaults file.")], cwd=first)
        remove_worktree(world.repo, first)  # merged and removed before Engram ever read the session

        # `engram backfill` (as at install) reads the session whose folder is gone: it belongs to the repository.
        out = world.engram("backfill").stdout
        assert "1 transcripts" in out, out
        assert world.query("SELECT DISTINCT project FROM sessions") == [(str(world.repo.resolve()),)]
        assert world.query("SELECT count(*) FROM failure_signatures WHERE memory_id IS NOT NULL")[0][0] == 1
        world.start_processor()

        # Session 2, in another worktree (Claude Code's own layout): the failing call is told what fixed it.
        second = add_worktree(world.repo, world.repo / ".claude" / "worktrees" / "rates", "rates")
        fix = told_at_the_call(world, "Run the billing tool for the rates", second)
        assert "what fixed it: `python3 tool.py --config defaults.toml`" in fix.lower(), fix

        # Session 3, in a clone of the same remote in another folder: the same project, the same fix.
        copy = clone(world.repo, tmp_path / "elsewhere" / "billing-copy", "https://github.com/Org/Billing")
        fix = told_at_the_call(world, "Run the billing tool in the copy", copy)
        assert "what fixed it: `python3 tool.py --config defaults.toml`" in fix.lower(), fix

        status = json.loads(world.engram("status", "--json").stdout)
        assert status["project_count"] == 1, status["projects"]
        [project] = status["projects"]
        assert project["project"] == str(world.repo.resolve()) and project["sessions"] == 3, project
        returncode, stderr = world.stop_processor()
    assert returncode == 0 and "Traceback" not in stderr, stderr
    assert time.monotonic() - started < 180
