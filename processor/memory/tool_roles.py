"""Which program a project runs for a job (its linter, formatter, test runner), told when another is not found.

cipher-box 02-16: to lint a file the agent ran `pnpm --filter web exec biome check …` and `pnpm biome check …`
(both 'Command "biome" not found'), then an `npx biome check` that checked nothing; the project lints with ESLint
(`npx eslint --fix …` ran clean on 02-12) and has no Biome (both labellers). An agent reaches for the tool it
knows for a job; when that one is not there, what the project's sessions ran for the same job is the answer.

A job is a kind of tool of one language's world (``ROLES``): JavaScript's linters, formatters and test runners,
Python's. The project's program for it is the one its sessions last ran clean by name (``npx eslint``, `uv run
pytest`); told right after another program of the job is not found — one its sessions never ran by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from processor.hook_kit.tool_keys import simple_commands

# (job, its programs): a program may do two jobs (Biome lints and formats; Ruff too).
ROLES: tuple[tuple[str, frozenset[str]], ...] = (
    ("lints", frozenset({"eslint", "biome", "oxlint", "tslint", "xo", "standard"})),
    ("formats", frozenset({"prettier", "biome", "dprint"})),
    ("runs its tests", frozenset({"jest", "vitest", "mocha", "ava"})),
    ("lints", frozenset({"ruff", "flake8", "pylint", "pycodestyle", "pyflakes"})),
    ("formats", frozenset({"black", "ruff", "autopep8", "yapf"})),
    ("runs its tests", frozenset({"pytest", "nose2"})),
)
PREFIX = "uses:"  # the id of what is told: no memory of its own (recall/injections.py)
PROGRAMS = frozenset(p for _, programs in ROLES for p in programs)
# What runs a package's program: the word after it is the program (`npx eslint`, `uv run pytest`, `pnpm exec jest`).
_RUNNERS = frozenset({"npx", "bunx", "exec", "dlx", "run", "-m"})


@dataclass(frozen=True)
class Used:
    """The program a project's sessions last ran clean for a job, and the call."""

    role: int  # its index in ROLES
    program: str
    command: str
    ts_ms: int

    @property
    def job(self) -> str:
        return ROLES[self.role][0]


def programs_of(command: str) -> set[str]:
    """The job programs a shell command runs: a segment's program, or the one a runner runs (``npx eslint``,
    ``pnpm --filter web exec biome``, ``python -m pytest``) — not a word that only names one (``grep eslint``)."""
    found: set[str] = set()
    for segment in simple_commands(command):
        words = [w for w in segment.split() if "=" not in w or w.startswith("-")]
        if not words:
            continue
        program = words[0].rpartition("/")[2]
        if program in PROGRAMS:
            found.add(program)
        for before, word in zip(words, words[1:], strict=False):
            if before in _RUNNERS and word.rpartition("/")[2] in PROGRAMS:
                found.add(word.rpartition("/")[2])
    return found


def project_tools(calls: Iterable[tuple[str, int]]) -> list[Used]:
    """The program the project's sessions last ran clean for each job (`calls`: clean shell commands with their
    time, the newest first): one a job and language."""
    used: dict[int, Used] = {}
    for command, ts_ms in calls:
        for program in programs_of(command):
            for index, (_, programs) in enumerate(ROLES):
                if program in programs and index not in used:
                    used[index] = Used(index, program, command, ts_ms)
    return [used[i] for i in sorted(used)]


def others(used: Used, ran: set[str]) -> list[str]:
    """The programs of the same job and language the project's sessions never ran (`ran`): told `used` when one of
    them is not found."""
    return sorted(p for p in ROLES[used.role][1] if p != used.program and p not in ran)
