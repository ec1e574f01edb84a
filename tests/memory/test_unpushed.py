"""Which branches a shell command pushes, resets or pulls into, as the commands of real sessions wrote them."""

from __future__ import annotations

import pytest

from processor.hook_kit.branches import pull_keys
from processor.memory.unpushed import ALL, Commit, pushed, reset_to_remote, unpushed
from processor.store.tool_calls import StoredToolCall


@pytest.mark.parametrize(("command", "current", "branches"), [
    ("git push -u origin feat/quick-007-ipns-signature-validation", "main",
     {"feat/quick-007-ipns-signature-validation"}),
    ("git push", "feat/phase-12.2", {"feat/phase-12.2"}),  # bare: the checked-out branch
    ("git push", None, set()),  # from where: not known
    ("cd /Users/palimondo/Developer/BookMinder && git push origin main", "astral", {"main"}),
    ("git push --force-with-lease origin feat/quick-013-move-multi-select-bar-bottom", None,
     {"feat/quick-013-move-multi-select-bar-bottom"}),
    ("git push -u origin chore/todo-cleanup 2>&1", None, {"chore/todo-cleanup"}),
    ("git push origin HEAD", "fix/auth-publickey-format", {"fix/auth-publickey-format"}),
    ("git push origin +wip:refs/heads/wip", None, {"wip"}),
    ("git checkout fix/x && git push", "main", {"fix/x"}),  # the checkout earlier in the command moved it
    ("git push --all origin", None, {ALL}),
    ("git status && git log --oneline -3", "main", set()),
])
def test_the_branches_a_command_pushed(command: str, current: str | None, branches: set[str]) -> None:
    assert pushed(command, current) == branches


def test_a_hard_reset_to_the_remote_takes_a_branchs_local_commits_away() -> None:
    assert reset_to_remote("git reset --hard origin/main && git pull") == {"main"}
    assert reset_to_remote("git reset --hard HEAD~1 && git status") == set()  # not to the remote's
    assert reset_to_remote("git reset origin/main") == set()  # the commits stay in the work tree's history


@pytest.mark.parametrize(("command", "branch", "keys"), [
    ("git checkout main && git pull && git branch -d feat/quick-007", "feat/quick-007", ["pull:main"]),
    ("git stash && git checkout main && git pull", "feat/matrix-effect-visibility", ["pull:main"]),
    ("git pull --rebase", "feat/phase-12.6", ["pull:feat/phase-12.6"]),
    ("git pull origin main && git checkout -b feat/phase-12.2", "main", ["pull:main"]),
    ("git pull", None, []),
    ("git checkout -- src/app.ts && git status", "main", []),  # a file's checkout moves no branch
])
def test_the_branch_a_pull_pulls_into(command: str, branch: str | None, keys: list[str]) -> None:
    assert pull_keys(command, branch) == keys


def _push(session: str, at: int, command: str) -> StoredToolCall:
    return StoredToolCall(tool_use_id=f"toolu_{at}", session_id=session, use_uuid=f"u{at}", ts_ms=at, tool="Bash",
                          target=command, failed=False, error=None, result_uuid=f"r{at}", result_ts_ms=at + 1)


def test_a_branchs_commits_after_its_last_push_are_unpushed_and_only_those_made_here() -> None:
    """cipher-box 644f505c's `63dbde7` on `main`, then its branch pushed twice; a teammate's commit on `main`, its
    memory pulled from the shared database, is not in this checkout (nor are that machine's pushes here)."""
    made = [Commit("m1", "63dbde7", "main", "docs: start work on todo", 100, "s1"),
            Commit("m2", "a70e79a", "feat/q7", "feat: validate", 200, "s1"),
            Commit("m3", "ffe6886", "feat/q7", "fix: review", 300, "s1"),
            Commit("m4", "9c0ffee", "main", "chore: theirs", 350, "s-elsewhere")]
    calls = [_push("s1", 250, "git push -u origin feat/q7"), _push("s1", 310, "git push")]
    assert unpushed(made, calls, {"s1"}) == {"main": [made[0]]}
    assert unpushed(made, [*calls, _push("s2", 400, "git reset --hard origin/main && git pull")], {"s1"}) == {}
