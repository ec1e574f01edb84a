"""Which programs are not installed where a project's sessions run, and what did their job instead.

An agent reaches for the tool it knows: ``psql`` to look at the database, ``docker compose up`` to start the
services. Where the project's sessions run, some of those are simply not there, and every new session meets
"command not found: psql" again, then spends a few calls finding what the last one found: that the database is
queried with the ``pg`` client the project already has (``cd apps/api && node -e "…require('pg')…"``).

A program is absent here when a session of the project met it not found (the shell's "command not found", or a
shell call that said only "Exit code 127") and no session of the project ever ran it, bare, clean — neither
before nor since (a program found after ``source .venv/bin/activate`` or an ``export PATH=`` is there: that is
``processor/memory/environments.py``'s and the error fixes' business). What did its job instead is the first
clean shell call after it, before the next prompt, that runs another program on the same things — two or more of
the failed command's own words (the host, the database, the query's table), never one that only looks for the
program (``which psql``, ``--version``) —, the last such: the way the session settled on.

What the user said of it then is kept too: their words right after it was not found — typed while the agent
went on (Claude Code hands them over mid-turn) or their next message — that name the program ("did we not go
through this before, you dont have access to docker here", "docker is running on your host."): cipher-box's
next sessions reached for `docker exec … psql` and `docker ps` again, several calls each, until the user said it
again.

One ``gotcha`` memory a program and project (miner ``absent``), made by the episodizer as the environment's is,
replaced when what it says changed (another day it was not found, another way round it, more the user said), and
retired the moment the program runs clean here. It is told right after that program is not found again
(``processor/recall/lesson_index.py``): a moment the agent has already met it; and, when the user said something
of it, before a call that runs it too — the user's words are not the shell's, which may have the program by now.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processor.clock import utc_date
from processor.hook_kit.failure_keys import call_signature, missing_program_of
from processor.hook_kit.tool_keys import RUNNERS, WRAPPERS
from processor.memory.command_text import command_told
from processor.memory.failed_calls import inspects
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.preferences import user_sentences
from processor.redaction import redact
from processor.store.tool_calls import StoredToolCall

MAX_DAYS = 3  # the newest days it was not found, as the memory says them
INSTEAD_CHARS = 220
MIN_SHARED = 2  # the failed command's own words a call must share to be doing its job
MAX_SAID = 2  # the user's sentences about the program the memory keeps
SAID_CHARS = 160
USER_SAID = "user: "  # the entity that keeps each of the user's sentences: the lesson index tells it before a call
# What a shell runs a command through or under: the program is the word after them.
_PREFIXES = WRAPPERS | {"env", "xargs"}
_SEARCHES = frozenset({"which", "type", "whereis"})  # a call that looks for a program does not do its job
_SEPARATORS = re.compile(r"(&&|\|\||;|\||\n|\$\(|`)")
_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*(?:\"|$)|'[^']*(?:'|$)")  # to its end when cut before it closes
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{3,}")
_CLAUSE = re.compile(r"[,;]\s+")


@dataclass(frozen=True)
class Absent:
    """A program the project's sessions met not found and never ran: when, and what did its job instead."""

    program: str
    days: tuple[str, ...]  # the days it was not found, the newest ``MAX_DAYS``
    instead: StoredToolCall | None  # the newest call that did its job after it was not found
    failed: tuple[StoredToolCall, ...]  # its not-found calls, newest first
    instead_in: str | None = None  # the `cd` the shell was left in when that call ran
    said: tuple[str, ...] = ()  # what the user said of it right after it was not found, as written


def not_found_program(call: StoredToolCall) -> str | None:
    """The program a failed shell call says was not found, when the command runs it (``fatal: remote origin not
    found`` names no program the command ran)."""
    if call.tool != "Bash" or not call.failed or not call.error:
        return None
    for line in call_signature(call.tool, call.target, call.error):
        program = missing_program_of(line)
        if program and program in programs_run(call.target or ""):
            return program
    return None


def _unquoted(command: str) -> str:
    """The command with its quoted spans blanked: what runs elsewhere (``ssh host "docker ps"``) or is an
    argument (``node -e "…"``) is not a step of this shell's."""
    return _QUOTED.sub(" ", command)


def _steps(command: str) -> list[tuple[str, bool]]:
    """Each step of a shell command as (its program, whether the command's clean exit proves that step ran clean);
    a runner's step also as the program it runs."""
    parts = _SEPARATORS.split(_unquoted(command))  # steps and, between them, the separators
    found: list[tuple[str, bool]] = []
    for index in range(0, len(parts), 2):
        words = [w for w in parts[index].split() if w not in ("(", ")", "{", "}", "do", "then", "else", "!")]
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in _PREFIXES):
            words = words[1:]
        after = parts[index + 1] if index + 1 < len(parts) else ""
        # A clean exit proves nothing of a step with a fallback (`|| echo`), nor of one piped on with its errors
        # thrown away (`2>/dev/null | grep`): `| tail` shows what it said, so the session would have seen it.
        proven = after != "||" and not (after == "|" and "/dev/null" in parts[index])
        if words:
            found.append((words[0], proven))
            ran = _run_by(words)
            if ran:
                found.append((ran, proven))  # `npx vite build` runs vite: the project has it, in its packages
    return found


def _run_by(words: list[str]) -> str | None:
    """The program a runner runs (``npx vite``, ``uv run pytest``, ``pnpm exec jest``), or None."""
    if words[0] not in RUNNERS:
        return None
    verb = RUNNERS[words[0]]  # `npx vite`: none; `pnpm --filter web exec vite`: past its `exec`
    if verb and verb not in words:
        return None
    rest = [w for w in words[words.index(verb) + 1 if verb else 1:] if not w.startswith("-")]
    return rest[0] if rest else None


def programs_run(command: str) -> list[str]:
    """The programs a shell command runs, each as the first word of a step of it (past ``VAR=value``, ``sudo``
    and the like): ``PGPASSWORD=x psql …`` runs psql; ``which psql`` runs which; ``/usr/bin/psql`` runs a path."""
    return list(dict.fromkeys(program for program, _ in _steps(command)))


def runs_bare(command: str, program: str) -> bool:
    """Whether a command that exited clean ran `program` by its name (or through a runner: ``npx vite``), clean:
    not by a path, not as what `which` looks for, not on another machine (``ssh host "…"``), not where an ``||
    echo`` or a pipe that threw its errors away hid its failure."""
    return any(step == program and proven for step, proven in _steps(command))


def _own_words(command: str, program: str, root: str | None) -> set[str]:
    """A command's words that say what it works on (the host, the database, a table), not where it ran or how."""
    line = " ".join(command.split())
    if root:
        line = line.replace(root, " ")
    return {w.strip(".:-").lower() for w in _WORD.findall(line) if w.lower() != program} - {""}


def instead_of(failed: StoredToolCall, later: Iterable[StoredToolCall], program: str,
               root: str | None) -> tuple[StoredToolCall, str | None] | None:
    """The clean shell call of `later` (the same prompt's calls after `failed`) that did what `failed` meant to
    with another program: the one that shares most of its own words (``MIN_SHARED`` at least), the last of those
    (the way the session settled on: its first `node -e` with the `pg` client exited 0 on "password authentication
    failed"; the next, with the right user, ran the same query), never a search for the program. With the `cd`
    an earlier call left the shell in, when it began with none (the shell stays where a `cd` took it)."""
    wanted = _own_words(failed.target or "", program, root)
    if len(wanted) < MIN_SHARED:
        return None
    best: tuple[StoredToolCall, str | None] | None = None
    most, where = 0, None
    for call in later:
        if call.tool != "Bash" or not call.target:
            continue
        starts_in = where
        if call.target.lstrip().startswith("cd ") and "&&" in call.target:
            where = call.target.lstrip().split("&&", 1)[0].strip()
        if call.failed or inspects(call):
            continue
        runs = programs_run(call.target)
        if program in runs or _SEARCHES & set(runs):
            continue
        shared = len(wanted & _own_words(call.target, program, root))
        if shared >= max(MIN_SHARED, most):
            most = shared
            best = (call, None if call.target.lstrip().startswith("cd ") else starts_in)
    return best


def said_of(program: str, messages: Iterable[str]) -> list[str]:
    """The user's sentences in `messages` that name `program` as a word and state something (no question, no code
    or pasted output: ``preferences.user_sentences``), each once — a clause of one, when what comes before its
    comma asks ("did we not go through this before, you dont have access to docker here")."""
    name = re.compile(rf"(?<![\w./-]){re.escape(program)}(?![\w/-])", re.IGNORECASE)
    found: list[str] = []
    for text in messages:
        for clause in _CLAUSE.split(text):
            for sentence, _ in user_sentences(clause):
                if name.search(sentence) and sentence not in found and len(sentence) <= SAID_CHARS:
                    found.append(sentence)
    return found


def absent_programs(failed: list[StoredToolCall], runs_clean: Callable[[str], bool],
                    later_calls: Callable[[StoredToolCall], list[StoredToolCall]],
                    root: str | None, user_words: Callable[[StoredToolCall], list[str]] | None = None) -> list[Absent]:
    """From the project's failed shell calls (the newest first): the programs met not found that never ran clean
    here (`runs_clean`: whether the project ever ran it, bare, clean), each with what did its job instead
    (`later_calls`: the calls after a failed one, up to its session's next prompt) and what the user said of it
    (`user_words`: the user's messages right after a failed call)."""
    by_program: dict[str, list[StoredToolCall]] = {}
    for call in failed:
        program = not_found_program(call)
        if program and program[:1].isalpha():
            by_program.setdefault(program, []).append(call)
    found: list[Absent] = []
    for program, calls in sorted(by_program.items()):
        if runs_clean(program):
            continue
        days = tuple(dict.fromkeys(utc_date(c.ts_ms) for c in calls if c.ts_ms))[:MAX_DAYS]
        done = next((done for call in calls if (done := instead_of(call, later_calls(call), program, root))), None)
        instead, where = done if done else (None, None)
        said = said_of(program, (text for call in reversed(calls) for text in user_words(call))) if user_words else []
        found.append(Absent(program, days, instead, tuple(calls), where, tuple(said[-MAX_SAID:])))
    return found


def _said(days: tuple[str, ...]) -> str:
    oldest_first = sorted(days)
    return oldest_first[0] if len(days) == 1 else ", ".join(oldest_first[:-1]) + " and " + oldest_first[-1]


def finding(project: str, absent: Absent, at_ms: int) -> Finding:
    """The memory of a program not installed where the project's sessions run: told right after it is not found
    again (its entities: the program, and what did its job as a command)."""
    text = f"`{absent.program}` is not on the PATH of this project's sessions"
    text += f": not found on {_said(absent.days)}, never run here by that name." if absent.days else "."
    entities = [absent.program]
    if absent.instead is not None:
        ran = " ".join((absent.instead.target or "").split())
        done = command_told(f"{absent.instead_in} && {ran}" if absent.instead_in else ran, INSTEAD_CHARS, project)
        text += f" What did its job instead: `{done}`."
        entities.append(f"$ {done}")
    if absent.said:
        text += " The user said then: " + " ".join(f"“{sentence}”" for sentence in absent.said)
        entities += [USER_SAID + sentence for sentence in absent.said]
    text = redact(text)
    sources = [u for call in (*absent.failed[:2], absent.instead) if call is not None
               for u in (call.use_uuid, call.result_uuid) if u]
    return Finding(id=episode_id(f"absent:{project}:{text}"), kind="gotcha", summary=text, full_content=text,
                   entities=[redact(e) for e in entities], source_uuids=list(dict.fromkeys(sources)),
                   created_at=absent.failed[0].ts_ms if absent.failed and absent.failed[0].ts_ms else at_ms,
                   miner="absent", scope=scope_for(None, project))
