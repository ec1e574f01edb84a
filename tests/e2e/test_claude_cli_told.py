"""Told when it matters, in a real Claude Code session: the CLI bundled with claude-agent-sdk against a fake
Messages API on 127.0.0.1, Engram installed in a temporary HOME and its processor capturing the sessions.

- A user's decision stated in one session ("Decision for the billing service: we use PostgreSQL 16 …") reaches
  the model in the next session that works on the billing database.
- A command that failed and was fixed in one session fails the same way in the next: right after the failure,
  Claude Code's PostToolUseFailure hook hands the model what fixed it, beside the failed result.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.testbed.claude_cli import FENCE_CLOSE, FENCE_OPEN, ClaudeCLI, EngramClaude, wait_for
from bench.testbed.fake_anthropic import Reply

CLI = ClaudeCLI.bundled()
pytestmark = pytest.mark.skipif(
    CLI is None,
    reason="the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)")

DECISION = "Decision for the billing service: we use PostgreSQL 16 for the billing database, never MySQL."
LATER = "Set up the database connection for the billing service"
TOOL = """import sys
if "--config" not in sys.argv:
    sys.exit("error: settings file billing.toml not found; pass --config defaults.toml")
print("billing tool ready")
"""


def bash(command: str) -> Reply:
    return Reply.tool("Bash", {"command": command, "description": command})


def told(texts: list[str]) -> str:
    """Engram's fenced context among these message texts."""
    return "\n".join(t[t.index(FENCE_OPEN):] for t in texts if FENCE_OPEN in t and FENCE_CLOSE in t)


def test_a_decision_and_a_fix_are_told_in_the_next_session(tmp_path: Path) -> None:
    assert CLI is not None
    started = time.monotonic()
    with EngramClaude(tmp_path, CLI, repo_name="billing") as world:
        world.install()
        (world.repo / "tool.py").write_text(TOOL)
        world.start_processor()

        # Session 1: the user decides; the tool fails, and a changed command gets past it.
        first = world.ask(DECISION, [Reply.text("Noted: PostgreSQL 16 for billing.")])
        world.ask("Run the billing tool", [bash("python3 tool.py"), bash("python3 tool.py --config defaults.toml"),
                                           Reply.text("It runs with the defaults file.")], resume=first.session_id)
        wait_for(lambda: world.query("SELECT count(*) FROM episodes e JOIN memory_origins o ON o.episode_id = e.id "
                                     "WHERE o.miner = 'decision'")[0][0] == 1, 60, "the decision as a memory")
        wait_for(lambda: world.query("SELECT count(*) FROM failure_signatures WHERE memory_id IS NOT NULL")[0][0]
                 == 1, 60, "the fix as a memory")
        before = len(world.server.conversation)

        # Session 2, a new one: the decision reaches the model before it works on the billing database.
        second = world.ask(LATER, [world.after_recollection(LATER, bash("ls")), Reply.text("Done.")])
        assert second.session_id != first.session_id
        later = world.server.conversation[before:]
        seen = told([t for r in later for _, t in r.texts()])
        assert "PostgreSQL 16 for the billing database, never MySQL" in seen, seen

        # The same failure in session 2: what fixed it comes right after the failed result.
        before = len(world.server.conversation)
        world.ask("Run the billing tool again", [bash("python3 tool.py"), Reply.text("Fixed with the config.")],
                  resume=second.session_id)
        after_failure = world.server.conversation[before + 1]
        fix = told([t for _, t in after_failure.texts()])
        assert "This failed the same way" in fix and "python3 tool.py --config defaults.toml" in fix, fix

        returncode, stderr = world.stop_processor()
    assert returncode == 0 and "Traceback" not in stderr, stderr
    assert time.monotonic() - started < 120
