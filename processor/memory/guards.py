"""What a rule forbids, as a guard: the command form it rules out, told just before a call of that form.

A rule the user stated ("Never use `git add -A` here; stage files by name", "don't run `npm`, we use pnpm")
helps at one moment: the call that would break it. Told at every call of the program, or at a prompt that shares
a word, it is noise that teaches the agent to skip Engram's lines. So a rule that forbids a command is filed as a
guard: under the key of that command (``processor/hook_kit/tool_keys.py``: staging everything has its own key,
``cmd:git add -A``), with the words that make a call of it break the rule (``--force`` of ``git push --force``);
the hook tells it only before a call that has them.

English negations only (never, don't, avoid, no more, instead of…, "would not work in my case"); the forbidden
form is what the rule quotes in backticks.
"""

from __future__ import annotations

import re

from processor.hook_kit.tool_keys import command_key, prog_key, stages_everything
from processor.memory.preferences import DOES_NOT_WORK

_NEGATION = re.compile(r"\b(?:never|don't|do not|dont|must not|mustn't|shouldn't|should not|avoid|no more|stop using|"
                       r"not allowed|forbidden|instead of|rather than)\b|\b" + DOES_NOT_WORK, re.IGNORECASE)
_QUOTED = re.compile(r"`([^`\n]{2,60})`")
_INSTEAD = re.compile(r"instead of|rather than", re.IGNORECASE)


def forbidden_commands(rules: list[str]) -> list[str]:
    """Commands the project's rules rule out, as typed: the backticked commands of a sentence that says never,
    don't or avoid ("Never use `git add -A` here")."""
    found: list[str] = []
    for rule in rules:
        for sentence in re.split(r"(?<=[.!?;])\s+", rule):
            cues = list(_NEGATION.finditer(sentence))
            if not cues:
                continue
            quoted = list(_QUOTED.finditer(sentence))
            if all(_INSTEAD.fullmatch(m.group(0)) for m in cues):
                # "use `pnpm` instead of `npm`": what it drops is the command after the cue, not the one it keeps
                quoted = [q for q in quoted if any(q.start() >= m.end() for m in cues)][:1]
            found += [q.group(1).strip() for q in quoted if command_key(q.group(1).strip())]
    return found


# "No commits directly to main, ever!!!", "never push to master", "don't commit on `main`": a branch the user's
# rule keeps git's commits or pushes off — told before a commit (or push) made while on it, not before every one.
_OFF_BRANCH = re.compile(r"\b(?:no|never|don't|do not|dont|must not|mustn't|shouldn't|should not)\b[^.!?;]{0,40}?"
                         r"\b(?P<verb>commit|push)(?:s|es|ed|ing)?\b[^.!?;]{0,30}?\b(?:to|on|onto|into|against)\s+"
                         r"(?:the\s+)?`?(?P<branch>main|master|trunk|develop)`?(?![\w/-])", re.IGNORECASE)


def branch_guards(rules: list[str]) -> list[tuple[str, str]]:
    """(the key of the git command, the branch) of each rule that keeps commits or pushes off a branch."""
    return [(f"cmd:git {m.group('verb').lower()}", m.group("branch").lower())
            for rule in rules for m in _OFF_BRANCH.finditer(rule)]


def guard(command: str) -> tuple[str, list[str]] | None:
    """Where a forbidden command is guarded: (the key a call of it has, the words beyond the key's that make a
    call break the rule — [] when any call of the key does), or None when it is not a command."""
    broad = stages_everything(command)
    if broad is not None:
        return broad, []
    key = command_key(command)
    if key is None:
        return None
    if len(command.split()) == 1:  # a program ("never `npm` here"): every call of it, whatever it goes on to do
        program = prog_key(key)
        return (program, []) if program else None
    named = set(key[4:].split())
    return key, [w for w in command.split()[1:] if w not in named][:3]
