"""Which programs a project runs inside an environment, and so which "not found" a fix of another one answers.

A fix that made `python` found (``source .venv/bin/activate && python -m pytest``) is the fix of `pytest` not
found too, and of `pre-commit` not found, when those ran in the project after the same activation: the project's
tools live in that environment. The failure hook tells a fix only under its own way of failing, so a session
that met `pytest: command not found` for the first time was told nothing while the answer sat under `python`.

Only programs seen to run clean after the activation are answered (a `uv` that lives outside the virtualenv is
not told to activate it), and only "not found" failures that name the program: the fix's own signature with
its program's name replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from processor.hook_kit.failure_keys import program_of
from processor.hook_kit.failure_keys import signature as failure_signature
from processor.hook_kit.tool_keys import GENERIC, command_keys

# What sets up a shell so that a project's tools are found: a virtualenv's activate script, a conda
# environment, a node version, a PATH entry. The text matched is what later commands are looked for with.
_ACTIVATION = re.compile(
    r"(?:(?<![\w.])(?:source|\.)\s+[\w./~$-]*bin/activate(?![\w.])"
    r"|\b(?:conda|mamba|micromamba)\s+activate\s+[\w./~-]+"
    r"|\bnvm\s+use(?:\s+[\w.-]+)?"
    r"|\bexport\s+PATH=(?:\"[^\"\n]*\"|'[^'\n]*'|\S+))")
# A failure that says the program itself is missing, in its masked signature (``<id> command not found python``).
_MISSING = ("not found", "no module named", "no such command")


def activation_of(fix: str) -> str | None:
    """The environment set-up a fix starts its command with (``source .venv/bin/activate``), or None."""
    found = _ACTIVATION.search(fix.replace("`", " "))
    return found.group(0) if found else None


def programs_after(commands: Iterable[str], activation: str) -> set[str]:
    """The programs run after `activation` in these commands (``python -m pytest``: python and pytest)."""
    programs: set[str] = set()
    for command in commands:
        at = command.find(activation)
        if at < 0:
            continue
        for key in command_keys(command[at + len(activation):]):
            if not key.startswith("cmd:"):
                continue
            for program in (key[4:].split()[0], program_of(key)):
                if program not in GENERIC and program[:1].isalpha():
                    programs.add(program)
    return programs


def missing_program(signature: list[str], program: str) -> bool:
    """Whether a masked failure signature says `program` itself was not found."""
    return any(program in line.split() and any(form in line for form in _MISSING) for line in signature)


def environment_fix(signature: list[str], program: str, fix: str | None) -> str | None:
    """The environment set-up of a fix that made `program` found (``source .venv/bin/activate``), or None when
    the failure was not the program missing or the fix sets up no environment."""
    return activation_of(fix or "") if missing_program(signature, program) else None


# How shells and Python say a program is missing, as real errors: their signatures are what the hook compares.
_MISSING_ERRORS = ("zsh: command not found: {0}", "bash: {0}: command not found",
                   "bash: line 1: {0}: command not found", "/bin/sh: 1: {0}: not found",
                   "/usr/bin/python3: No module named {0}")


def as_missing(signature: list[str], program: str, other: str) -> list[str]:
    """The same "not found" signature, of another program, and the other ways a shell or Python says it is
    missing (a `python3 -m pytest` meets "No module named pytest" where `pytest` met "command not found")."""
    ways = [" ".join(other if word == program else word for word in line.split()) for line in signature]
    for error in _MISSING_ERRORS:
        ways += [line for line in failure_signature(error.format(other)) if line not in ways]
    return ways
