"""What a commit hook said when it stopped a commit: which of its checks failed, and whether they changed files.

A commit that a hook stopped is the most repeated failure of agent sessions: the agent commits, the hook's
formatter rewrites files or its linter complains, the agent re-stages and commits again. The retry is not the
lesson (it is what every agent does anyway); the lesson is the step that avoids the failure: run what the hook
runs before committing. The hook's own output names that step, in the formats of the common hook runners:

- pre-commit (``<hook name>.....Failed`` status lines, ``- hook id: <id>``, ``- files were modified by this hook``):
  ``pre-commit run`` runs every hook of the repository on demand;
- lint-staged (``[FAILED] <command>``, ``✖ <command>``), usually under husky (``husky - pre-commit script
  failed``): the failing command is the step, run on the staged files;
- lefthook (``<command> ❯`` / ``✗`` / ``🥊``) and a bare husky script: the hook failed; its message is the lesson.

English and these runners' own words only; a hook that prints something else still has its failure signature
and, when a session got past it by a real step (``pnpm api:generate`` before staging), that step as its fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PRE_COMMIT_STATUS = re.compile(r"^(?P<name>\S.*?)\s*\.{3,}\s*(?:\([^)]*\)\s*)?(?P<status>Passed|Failed|Skipped)\s*$",
                                re.MULTILINE)
_PRE_COMMIT_ID = re.compile(r"^- hook id: (?P<id>\S+)\s*$", re.MULTILINE)
_MODIFIED = re.compile(r"^- files were modified by this hook\s*$", re.MULTILINE)
_LINT_STAGED_FAILED = re.compile(r"^\s*(?:\[FAILED\]|✖)\s+(?P<command>[^\[\n]+?)\s*(?:\[FAILED\]|:)?\s*$", re.MULTILINE)
_LINT_STAGED = re.compile(r"\blint-staged\b|\[STARTED\] Running tasks for staged files|Running tasks for staged")
_HUSKY = re.compile(r"husky - (?P<hook>pre-commit|commit-msg|pre-push) (?:script )?failed")
_LEFTHOOK = re.compile(r"^\s*(?:🥊|✗|╰─)?\s*(?P<command>[\w:.-]+)\s*❯", re.MULTILINE)
_FORMATTERS = ("prettier", "black", "ruff format", "gofmt", "rustfmt")  # commands that rewrite what they check
MAX_CHECKS = 4
# The hook runners whose refusals are read here: a project's lesson is one a runner.
HOOK_RUNNERS = ("pre-commit", "lefthook", "lint-staged", "husky")


@dataclass(frozen=True)
class HookFailure:
    """A commit hook's refusal: its runner, the checks that failed (names or commands), whether they rewrote
    files, and the command that runs them before a commit."""

    runner: str  # "pre-commit", "lint-staged", "lefthook", "husky"
    checks: tuple[str, ...]
    modified: bool
    run_first: str | None  # the command that runs the failed checks on demand, when the runner has one

    @property
    def rewrote_files(self) -> bool:
        """Its output says the checks changed the files (pre-commit's "files were modified by this hook"): the
        commit goes through once they are staged again. lint-staged reverts its fixers' changes when a check
        fails, so a fixer's failure there left the files as they were."""
        return self.modified and self.runner == "pre-commit"

    def lesson(self) -> str:
        """The step that avoids the failure, in a line: the step first (a bite cut to its length keeps it), then
        why."""
        checks = ", ".join(f"`{c}`" for c in self.checks) if self.checks else "checks"
        if len(self.checks) == 1:
            what = "rewrites files and stops the commit" if self.modified else "stops the commit when it fails"
        else:
            what = "rewrite files and stop the commit" if self.modified else "stop the commit when they fail"
        first = f"run `{self.run_first}`" if self.run_first else f"run the {self.runner} hook's checks"
        staged = " and stage what it changes" if self.modified or self.runner == "pre-commit" else ""
        return f"Before `git commit` here, {first}{staged}: its {self.runner} hook's {checks} {what}"


def hook_failure(command: str | None, error: str | None) -> HookFailure | None:
    """The commit hook that stopped this `git commit` (or `git push`, for a pre-push hook), None when the
    failure is not a hook's."""
    if not command or not error or not re.search(r"\bgit\b(?:\s+-C\s+\S+)?\s+(?:commit|push)\b", command):
        return None
    failed = [m.group("name").strip() for m in _PRE_COMMIT_STATUS.finditer(error) if m.group("status") == "Failed"]
    if failed:
        ids = _PRE_COMMIT_ID.findall(error)
        checks = tuple(dict.fromkeys(ids or failed))[:MAX_CHECKS]
        return HookFailure("pre-commit", checks, bool(_MODIFIED.search(error)), "pre-commit run --all-files")
    if _LINT_STAGED.search(error) or _LINT_STAGED_FAILED.search(error):
        commands = tuple(dict.fromkeys(m.group("command").strip() for m in _LINT_STAGED_FAILED.finditer(error)))
        if not commands and not husky_failed(error):
            return None  # its tasks all passed: the commit failed after them (cipher-box: "1Password: agent …")
        rewrites = any("--fix" in c or "--write" in c or c.startswith(_FORMATTERS) for c in commands)
        run = commands[0] if len(commands) == 1 else None
        return HookFailure("lint-staged", commands[:MAX_CHECKS], rewrites, run or "npx lint-staged")
    lefthook = tuple(dict.fromkeys(m.group("command") for m in _LEFTHOOK.finditer(error)))
    if lefthook and "lefthook" in error.lower():
        return HookFailure("lefthook", lefthook[:MAX_CHECKS], False, "lefthook run pre-commit")
    return None


def husky_failed(error: str | None) -> str | None:
    """The husky hook that failed (``pre-commit``…), or None: its own message above says what to do."""
    match = _HUSKY.search(error or "")
    return match.group("hook") if match else None
