"""Which programs a project runs inside an environment, and so which "not found" a fix of another one answers.

A fix that made `python` found (``source .venv/bin/activate && python -m pytest``) is the fix of `pytest` not
found too, and of `pre-commit` not found, when those ran in the project after the same activation: the project's
tools live in that environment. The failure hook tells a fix only under its own way of failing, so a session
that met `pytest: command not found` for the first time was told nothing while the answer sat under `python`.

Only programs seen to run clean after the activation are answered (a `uv` that lives outside the virtualenv is
not told to activate it), and only "not found" failures that name the program: the fix's own signature with
its program's name replaced.

A project need not have failed to know it: when its sessions ran `pytest` after `source venv/bin/activate`
(``run_inside``: at least ``MIN_RUNS`` clean runs, the newest after a set-up of that kind: a project that moved
its virtualenv runs its tools in the new one), the next session that runs it
bare and meets "command not found: pytest" was told nothing. That is one ``gotcha`` memory a project (miner
``environment``, made by the episodizer as a project's close-out routine is), filed under each program's "not
found" (``processor/recall/lesson_index.py``); when a program is last run bare, or the set-up changes, it is
replaced, and retired when no program is left.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from processor.hook_kit.failure_keys import missing_program_of, program_of
from processor.hook_kit.failure_keys import signature as failure_signature
from processor.hook_kit.tool_keys import GENERIC, command_keys
from processor.memory.command_text import recursive_removes
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact

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
    """Whether a masked failure signature says `program` itself was not found (``<id> command not found uv``, ``no
    module named pytest``): not an HTTP 404 of it (``gh not found http <n>``)."""
    return any(missing_program_of(line) == program
               or (program in line.split() and any(form in line for form in _MISSING[1:])) for line in signature)


def environment_fix(signature: list[str], program: str, fix: str | None) -> str | None:
    """The environment set-up of a fix that made `program` found (``source .venv/bin/activate``), or None when
    the failure was not the program missing or the fix sets up no environment."""
    return activation_of(fix or "") if missing_program(signature, program) else None


# How shells and Python say a program is missing, as real errors: their signatures are what the hook compares.
_MISSING_ERRORS = ("zsh: command not found: {0}", "bash: {0}: command not found",
                   "bash: line 1: {0}: command not found", "/bin/sh: 1: {0}: not found",
                   "/usr/bin/python3: No module named {0}",
                   "`{0}` not found.  Did you forget to activate your virtualenv?")  # pre-commit's git hook


def as_missing(signature: list[str], program: str, other: str) -> list[str]:
    """The same "not found" signature, of another program, and the other ways a shell or Python says it is
    missing (a `python3 -m pytest` meets "No module named pytest" where `pytest` met "command not found")."""
    ways = [" ".join(other if word == program else word for word in line.split()) for line in signature]
    return ways + [line for line in missing_signatures(other) if line not in ways]


def missing_signatures(program: str) -> list[str]:
    """The signatures of the ways a shell or Python says `program` is missing."""
    ways: list[str] = []
    for error in _MISSING_ERRORS:
        ways += [line for line in failure_signature(error.format(program)) if line not in ways]
    return ways


# --- the environment a project's tools run in, from how its sessions ran them --------------------------------

MIN_RUNS = 3  # clean runs of a program inside the environment before it is said to live there
MAX_PROGRAMS = 5


@dataclass(frozen=True)
class RunInside:
    """The environment the project's tools were last run in, and the programs last run inside it."""

    activation: str  # `source .venv/bin/activate`
    programs: tuple[str, ...]  # the most run first


def _programs(command: str) -> set[str]:
    """The programs a command runs (``python -m pytest``: python and pytest), not the shell's own."""
    found: set[str] = set()
    for key in command_keys(command):
        if key.startswith("cmd:"):
            found.update(p for p in (key[4:].split()[0], program_of(key)) if p not in GENERIC and p[:1].isalpha())
    return found


def kind_of(activation: str) -> str:
    """What kind of environment a set-up makes: a virtualenv (whatever its folder), a conda one, a node version,
    a PATH entry. A project that moved its virtualenv (``venv/`` to uv's ``.venv/``) runs the same tools in the
    new one: runs in the old count for the new."""
    if "bin/activate" in activation:
        return "virtualenv"
    return activation.split()[0] if activation.split() else activation


def _removed_by(command: str) -> set[str]:
    """The folders a clean command removed recursively, by the name a set-up uses (``rm -rf .uvenv/`` → .uvenv)."""
    return {path.rstrip("/") for _, paths in recursive_removes(command) for path in paths}


def _folder_of(activation: str) -> str | None:
    """The folder a virtualenv's set-up activates (``source .venv/bin/activate`` → .venv), None for another kind."""
    path = activation.split()[-1] if activation.split() else ""
    return path[:-len("/bin/activate")] if path.endswith("/bin/activate") else None


def run_inside(commands: Iterable[str]) -> RunInside | None:
    """From the project's clean shell commands (the newest first): the environment set-up its newest commands
    start with (not one whose folder a newer command removed: ``rm -rf .uvenv``), and the programs whose newest
    clean run came after a set-up of that kind (``kind_of``), run so at least ``MIN_RUNS`` times. A program last
    run bare (the project no longer needs the environment for it, or never did) is not one; None when no program
    is."""
    newest: dict[str, str | None] = {}  # program → the kind of set-up its newest clean run came after (None: bare)
    runs: Counter[str] = Counter()
    current: str | None = None
    removed: set[str] = set()  # folders a newer command removed: a set-up in one is gone (``rm -rf .uvenv``)
    for command in commands:
        activation = activation_of(command)
        inside = programs_after([command], activation) if activation else set()
        kind = kind_of(activation) if activation else None
        for program in _programs(command):
            newest.setdefault(program, kind if program in inside else None)
            if program in inside and kind == newest[program]:
                runs[program] += 1
        if activation and current is None and inside and _folder_of(activation) not in removed:
            current = activation
        removed |= _removed_by(command)
    if current is None:
        return None
    programs = sorted((p for p, k in newest.items() if k == kind_of(current) and runs[p] >= MIN_RUNS),
                      key=lambda p: (-runs[p], p))[:MAX_PROGRAMS]
    if not programs:
        return None
    return RunInside(current, tuple(programs))


# Python's programs, as a shell outside the environment has them (Homebrew's, a distribution's): `python3`, `pip3`.
_VERSIONED = frozenset({"python", "pip"})


def names_run_as(program: str) -> list[str]:
    """The names a program of the environment is run by outside it: `pip` as `pip3` too."""
    return [program, program + "3"] if program in _VERSIONED else [program]


def _listed(names: Iterable[str]) -> str:
    shown = [f"`{n}`" for n in names]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def finding(project: str, found: RunInside, at_ms: int) -> Finding:
    """The memory of where the project's tools run: told right after one of them is not found (its entities: the
    set-up as a command, and each program)."""
    text = redact(f"Here {_listed(found.programs)} ran inside the environment `{found.activation}` sets "
                  "up: earlier sessions ran them after it, in the same command (each shell call starts afresh): "
                  f"`{found.activation} && {found.programs[0]} …`.")
    # A virtualenv has its own `python` whatever its sessions ran in it: a `python` not found is answered by it too
    # (macOS has no bare `python`; the sessions ran `pytest` and `pip` in it, `python3 -m pytest` bare).
    interpreter = ["python"] if kind_of(found.activation) == "virtualenv" and "python" not in found.programs else []
    return Finding(id=episode_id(f"environment:{project}:{found.activation}:{','.join(sorted(found.programs))}"),
                   kind="gotcha", summary=text, full_content=text,
                   entities=[redact(f"$ {found.activation}"), *found.programs, *interpreter], source_uuids=[],
                   created_at=at_ms,
                   miner="environment", scope=scope_for(None, project))
