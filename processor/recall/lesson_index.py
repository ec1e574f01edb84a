"""The per-project index the PreToolUse hook reads to speak about the file or command in hand.

When an earlier session left a lesson, a rule or a decision about a file or a command, the agent should hear
it just before it touches that file or runs that command, not at a user message that merely shares words.
The hook cannot search (it is stdlib-only and its start-up is its cost), so the processor files each such
memory under the keys of what it is about (``processor/hook_kit/tool_keys.py``: ``file:…`` and ``cmd:…``) in a
small file per project, ``recollections/lessons/<sha1 of the project>.index`` (a folder of its own:
nothing that scans the session files mistakes them for one). Its first line is a JSON object saying whose it
is and which rules it guards at their calls (the SessionStart digest leaves those out); then one line per key,
the key as a JSON string, a tab, and the JSON list of what is filed under it::

    {"project": "/work/shop", "root": "/work/shop", "at": 1764151200000, "guarded": ["ep_…"]}
    "cmd:git add"\t[{"id": "ep_…", "bite": "…", "date": "2026-11-01", "importance": "normal", "kind": "gotcha"}]
    "file:dist/app.js"\t[{"id": "ep_…", …}]

Lines, ASCII only, because most tool calls touch nothing filed: the hook looks for ``\n"key"\t`` in the
text and parses the one line it finds, never the whole file (its start-up is its cost). The second line lists
the keys the file holds (``#keys\t"cmd:git add"\t"file:dist/app.js"\t``): a call's keys are looked for in
that short line first, so the hook scans the whole text only for a key that is there.

What is filed: memories that may be shown unasked (``processor.memory.unasked.pushable``) with something to
file them under: a lesson's failed command (entity ``$ …``) and changed files, a rule's backticked command
or path. Newest first, at most ``IDS_PER_KEY`` per key and ``MAX_BITES`` in all, under ``INDEX_LIMIT`` bytes.

A memory that tells what fixed a way of failing (``store/failures.py``) is filed under its failure key
(``fail:git``, ``processor/hook_kit/failure_keys.py``) with the failure's signature and the fix in a line (``"sig"``,
``"fix"``): the PostToolUseFailure hook tells it right after the same failure. Under its command's key (told
before the call) only once it recurred: that way of failing met in two sessions or more and in at least half of
the last sessions that ran the command (``processor/memory/failure_rates.py``), and never when it depends on the
moment (a lock file left behind, a path typed wrong, the network: ``failed_calls
.of_the_moment``). A fix of a program not found that activates an environment (``source .venv/bin/activate``)
is also filed under the failure key of each other program the project ran clean in that environment, as that
program not found (``"like"``: whose fix it was; ``processor/memory/environments.py``); so is the memory of
the environment the project's tools were run in (``"ran"``: its set-up), under each of those programs: told
after it is not found, or after a run of it outside that set-up failed for want of something (a module, the
environment: ``processor/hook_kit/failure_keys.py`` ``wants_environment``). A program not installed where the
project's sessions run (``processor/memory/absent_programs.py``) is filed under its "not found" the same way.
Some are filed with what the call must have for them to be told: a hook bypass the user declined under the
commands hooks run on (``"bypass"``: told before a call that skips them), the variables a command came to be run
with under that command (``"core"``, ``"vars"``: before a run of it that sets none), and a file too big to read
also under ``refused:Read`` (``"file"``: told right after a read of a file beside it is refused for its size).

The session's recollection file names its project's index (``"lessons"``) and root (``"root"``: the hook
makes a path relative to it before it looks a file up), and the writer brings the index
up to date when the project's memories changed (``refresh``), so a lesson learned an hour ago in another
session is there for the next tool call. A forgotten memory leaves every index at once (``drop``).

A memory stays filed for as long as it holds, however often it was told: a warning the agent then followed is
a success, not proof it was unneeded. An error's fix goes when a later session showed it is not needed
(``processor/memory/stale_fixes.py``: the command that failed ran clean without it, or it names a folder the
project no longer has).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path

from processor.clock import now_ms, utc_date
from processor.files import ensure_private_dir, write_atomic
from processor.hook_kit import hook_io
from processor.hook_kit.failure_keys import same_failure
from processor.hook_kit.project import index_name
from processor.hook_kit.tool_keys import (
    GENERIC,
    HOOKED_KEYS,
    command_key,
    command_keys,
    fact_keys,
    kind_key,
    name_key,
    path_like,
    prog_key,
    relative,
    stages_everything,
)
from processor.memory.absent_programs import USER_SAID
from processor.memory.bites import BITE_CHARS
from processor.memory.decisions import tool_names
from processor.memory.environments import (
    as_missing,
    environment_fix,
    missing_program,
    missing_signatures,
    names_run_as,
    programs_after,
)
from processor.memory.facts import statement_of
from processor.memory.failed_calls import asked_with, of_the_moment, ran_nothing
from processor.memory.failure_rates import worth_telling_before
from processor.memory.guards import branch_guards, forbidden_commands, guard
from processor.memory.left_running import LEFT_RUNNING_HOURS, STOP_TOOLS, Start, left_running, start_of, told_together
from processor.memory.lessons import fixed_by_editing, is_hook_lesson
from processor.memory.overrides import Written, left_in_place, started_there, written_of
from processor.memory.stale_fixes import missing_paths
from processor.memory.tool_roles import PREFIX as USES_PREFIX
from processor.memory.tool_roles import PROGRAMS, Used, others, programs_of, project_tools
from processor.memory.unasked import RECIPE_ROOM, bite_of, pushable
from processor.memory.unpushed import Commit, commit_of, unpushed
from processor.store import episodes as episodes_sql
from processor.store import failures as failures_sql
from processor.store import origins as origins_sql
from processor.store import tool_calls as tool_calls_sql
from processor.store.episodes import Episode
from processor.store.failures import FailureSignature

log = logging.getLogger(__name__)

FOLDER = hook_io.LESSONS_FOLDER  # the hooks read the index: its place and shape are the kit's
SUFFIX = hook_io.LESSONS_SUFFIX
IDS_PER_KEY = 5
FIXES_PER_KEY = 20  # ways a program failed, each with its fix, filed under its failure key
SIGNATURES_PER_FIX = 5  # ways of failing one fix is filed under (a commit hook's checks fail in several ways)
MAX_BITES = 300
INDEX_LIMIT = hook_io.LESSONS_LIMIT
SCANNED = 5_000  # the project's newest memories looked at
GIT_STATE_CALLS = ("git push", "git reset")  # the calls that take a branch's local commits away (or along)
UNPUSHED_SESSIONS = 20  # the project's newest sessions (with calls) whose commits and pushes are read
UNPUSHED_SHOWN = 3  # a branch's unpushed commits named, the newest first
UNPUSHED_MESSAGE_CHARS = 60
RUNNING_SHOWN = 4  # the commands a session left running named in one tell
_STEP = re.compile(r"\brun `([^`]+)`")  # the step a commit hook's lesson says to run first




def keys_of(ep: Episode, root: str | None) -> list[str]:
    """What a memory is about, as tool-call keys: its commands and the files it names."""
    keys: list[str] = []
    for entity in ep.entities:
        entity = entity.strip().strip("`")
        if entity.startswith("$ "):
            found = command_keys(entity[2:], root)
        elif " " not in entity and ("/" in entity or "." in entity.strip(".")):
            found = command_keys("cat " + entity, root)  # a path: the file keys of `cat PATH`
        elif " " in entity and entity.split()[0] not in GENERIC:
            found = [k for k in command_keys(entity, root) if k.startswith("cmd:")]  # `uv run pytest -m x`
        else:
            found = []
        keys += [k for k in found if k not in keys]
    return keys


def keys_by_origin(ep: Episode, origin: str | None, root: str | None) -> list[str]:
    """Where a memory is filed: a fact under the file, folder or name it is about; a decision under the files,
    names and programs it names; anything else under what its entities say (``keys_of``)."""
    if origin == "answered":  # the user's answer to a failure: after that failure only (``memory/answered.py``), its
        return []  # failure key; never before the command (what failed was the moment's: a locked signing agent)
    if origin == "tool_limit":  # a file too big to read whole: that file, not the folder (``memory/tool_limits.py``)
        return [k for k in fact_keys(ep.entities[0], root) if k.startswith("file:")] if ep.entities else []
    if origin == "fact":
        return fact_keys(ep.entities[0], root) if ep.entities else []
    if origin in ("correction", "file"):  # every name it gives, every file it is about
        return list(dict.fromkeys(k for name in ep.entities for k in fact_keys(name, root)))
    if origin in ("lesson", "error_fix"):
        # About running the command that failed: its key, and (a lesson) the files it named. Not the files edited
        # on the way (told on every read of them), and an error's fix not its files either: it is told after its
        # failure, and before the command once that failure recurred.
        commands = [e for e in ep.entities if e.startswith("$ ")]
        keys = [k for e in commands for k in command_keys(e[2:], root)]
        broad = [k for e in commands if (k := stages_everything(e[2:]))]
        if broad:  # `git add -A` swept in what had to be unstaged: told when staging everything, not any file
            return broad
        stated = statement_of(ep.summary)
        if stated is not None:  # "`dist/` is git-ignored, so …": also a fact about that path, told on touch
            return list(dict.fromkeys([*keys, *fact_keys(stated[1], root)]))
        return list(dict.fromkeys(k for k in keys if origin == "lesson" or k.startswith("cmd:")))
    if origin == "recipe":  # the call it is a recipe for (not its files: a read of one is not running it)
        keys = [k for e in ep.entities if e.startswith("$ ") for k in command_keys(e[2:], root)]
        return list(dict.fromkeys(k for k in keys if k.startswith("cmd:")))
    if origin == "decision":
        keys: list[str] = []
        tools = tool_names(ep.summary)
        for name in ep.entities:
            found = fact_keys(name, root)
            if name.lower() in tools:
                found.append("prog:" + name.lower())  # a tool or service chosen or dropped: `pnpm`, `npm`
            keys += [k for k in found if k not in keys]
        return keys
    return keys_of(ep, root)


GUARDED = frozenset({"standing", "decision"})  # what the user said: a command it forbids is guarded


def guards_of(ep: Episode, origin: str | None) -> list[tuple[str, list[str]]]:
    """A user's rule as guards (``processor/memory/guards.py``): each command it forbids, as the key a call of it
    has and the words that make the call break the rule."""
    if origin not in GUARDED and ep.source_type != "manual":
        return []
    found = [guard(command) for command in forbidden_commands([ep.summary, ep.full_content])]
    return list(dict.fromkeys((key, tuple(words)) for key, words in (g for g in found if g is not None)))  # type: ignore


def branch_guards_of(ep: Episode, origin: str | None) -> list[tuple[str, str]]:
    """A user's rule against committing or pushing to a branch (``processor/memory/guards.py``): (the key of the
    git command it forbids, the branch)."""
    if origin not in GUARDED and ep.source_type != "manual":
        return []
    return list(dict.fromkeys(branch_guards([ep.summary])))


def _covered(key: str, guards: list[tuple[str, list[str]]]) -> bool:
    """Whether a key of the program a rule guards (``cmd:git add`` of a guard on ``cmd:git add -A``, its
    ``prog:`` key): the rule is told at the guard's calls, not at this key's."""
    if not key.startswith(("cmd:", "prog:")):
        return False
    return any(key in (g, prog_key(g)) or g.startswith(key + " ") or key.startswith(g + " ") for g, _ in guards)


def environment_programs(conn, project: str | None, fixes: dict[str, list[FailureSignature]]) -> dict[str, set[str]]:
    """For each environment set-up a "not found" fix starts with (``source .venv/bin/activate``), the programs the
    project's clean commands ran after it."""
    activations = {activation for ways in fixes.values() for fix in ways
                   if (activation := environment_fix(fix.signature, fix.fail_key[5:], fix.fix))}
    return {activation: programs_after(tool_calls_sql.clean_commands_with(conn, project, activation), activation)
            for activation in activations}


def _answers_elsewhere(entry: dict, fix: FailureSignature, environments: dict[str, set[str]]) -> list[tuple[str, dict]]:
    """A fix of `python` not found that activates an environment, filed as the fix of each other program the
    project ran in it being not found (``processor/memory/environments.py``); ``"like"`` names whose it was."""
    program = fix.fail_key[5:]
    activation = environment_fix(fix.signature, program, fix.fix)
    if activation is None:
        return []
    return [("fail:" + other, {**entry, "sig": as_missing(fix.signature, program, other), "fix": fix.fix or "",
                               "like": program})
            for other in sorted(environments.get(activation, ())) if other != program]


def of_the_shell(fix: FailureSignature) -> bool:
    """Whether a failure was the shell's lack of the program it ran (``command not found: uv``, ``No module named
    pytest`` of ``python3 -m pytest``): its fix sets up the shell (a PATH, an environment), which a later session's
    may have set up already. Not a module the program itself imports (``No module named app``: the project's
    package not installed is the project's state, and its fix is told before the call once it recurs)."""
    return missing_program(fix.signature, fix.fail_key[5:])


def inside_environment(entry: dict, activation: str, programs: list[str]) -> None:
    """A step an entry says to run (its bite's and fix's backticked commands) that runs one of the project's
    environment programs bare, said with the environment's set-up: BookMinder's hook lesson said "run `pre-commit run
    --all-files`", which fails outside `.venv` (read: a session that ran it so failed). In place: an entry filed
    under several keys is one object."""
    for field in ("bite", "fix"):
        text = entry.get(field)
        if not isinstance(text, str) or activation in text or "ran" in entry:
            continue
        for program in sorted(programs, key=len, reverse=True):
            text = text.replace(f"`{program} ", f"`{activation} && {program} ")
        entry[field] = text


def _of_its_kind(ep: Episode, path: str, call_key: str, entry: dict) -> str:
    """A lesson told before a file of the kind it changed is written: which file failed which command (its failure's
    call key), and how (``12.2-CONTEXT.md`` made `git commit` fail here (markdownlint --fix) until it was changed:
    …)."""
    command = call_key[4:] if call_key.startswith("cmd:") else ""
    said = next((e for e in ep.entities[1:] if " " in e and not e.startswith("$ ")), "")
    how = f" ({said.replace('[FAILED]', '').strip()})" if said else ""
    name = path.rstrip("/").rpartition("/")[2]
    made = f" made `{command}` fail here{how}" if command else " failed here"
    return f"`{name}`{made} until it was changed: {entry['bite']}"


def _unpushed_entry(branch: str, commits: list[Commit]) -> dict:
    """The commits no session pushed of a branch (the newest first), as told before a pull into it: under the
    newest one's memory, learned in its session (which has them in its context)."""
    newest = commits[0]
    listed = ", ".join(f"`{c.sha[:9]}` {hook_io.one_line(c.message, UNPUSHED_MESSAGE_CHARS)}"
                       for c in commits[:UNPUSHED_SHOWN])
    more = f" and {len(commits) - UNPUSHED_SHOWN} more" if len(commits) > UNPUSHED_SHOWN else ""
    some = "a commit" if len(commits) == 1 else f"{len(commits)} commits"
    bite = (f"Local `{branch}` has {some} no session here pushed: {listed}{more} (committed "
            f"{utc_date(newest.ts_ms)}). A pull into it may meet diverged branches.")
    return {"id": newest.memory_id, "bite": bite, "date": utc_date(newest.ts_ms), "importance": "high",
            "kind": "fact", "session": newest.session_id}


def _minute(ms: int) -> str:
    """A time to the minute, UTC: what a session did within hours of now is told with its hour."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def _left_running_entry(starts: list[Start], last_call_ms: int) -> tuple[dict, list[str]]:
    """What the last sessions started in the background and left running (the oldest first), told before a call that
    starts one of them again (``runs``): under the newest one's memory, while the newest of those sessions' last
    call is under ``LEFT_RUNNING_HOURS`` old (``until``); with the keys it is filed under."""
    shown = starts[-RUNNING_SHOWN:]
    listed = [f"`{hook_io.one_line(s.runs, 80)}`" for s in shown]
    named = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    one = len(shown) == 1
    them, they, ports = ("it", "it", "its port") if one else ("them", "they", "their ports")
    ended = _minute(last_call_ms)
    sessions = "A session here (its last call" if len({s.session_id for s in shown}) == 1 else \
        "Sessions here (the last one's last call"
    bite = (f"{sessions} {ended}) started {named} in the background and never stopped {them}: {they} may still be "
            f"running, holding {ports}. Look (`lsof -i :PORT`, `ps`) before starting {them} again.")
    newest = shown[-1]
    entry = {"id": newest.memory_id, "bite": bite, "date": utc_date(newest.ts_ms), "importance": "high",
             "kind": "fact", "session": newest.session_id, "runs": [s.runs for s in shown],
             "until": last_call_ms + LEFT_RUNNING_HOURS * 3_600_000}
    return entry, list(dict.fromkeys(k for s in shown if (k := s.key)))


def _tool_entries(used: list[Used], ran: set[str]) -> list[tuple[str, dict]]:
    """(key, entry) of what the project runs for each job, told right after another program of the job its sessions
    never ran is not found (``tool_roles``)."""
    found: list[tuple[str, dict]] = []
    for tool in used:
        for other in others(tool, ran):
            bite = (f"This project {tool.job} with `{tool.program}`: `{hook_io.one_line(tool.command, 100)}` ran "
                    f"clean here ({utc_date(tool.ts_ms)}); its sessions never ran `{other}`.")
            found.append(("fail:" + other, {"id": USES_PREFIX + tool.program, "bite": bite,
                                            "date": utc_date(tool.ts_ms), "importance": "normal", "kind": "fact",
                                            "sig": missing_signatures(other)}))
    return found


def _override_entry(override: Written, runs: list[str]) -> tuple[dict, list[str]]:
    """A local override an earlier session wrote and left, told before a call that starts what reads it (`runs`);
    with the keys it is filed under."""
    at = _minute(override.ts_ms)
    where = f"What starts in `{override.folder}` reads it." if override.folder else "What starts here reads it."
    bite = (f"A session here wrote `{override.path}` ({at}) and left it: “{hook_io.one_line(override.text, 240)}”. "
            f"{where}")
    entry = {"id": override.memory_id, "bite": bite, "date": utc_date(override.ts_ms), "importance": "high",
             "kind": "fact", "session": override.session_id, "starts": runs}
    return entry, list(dict.fromkeys(k for run in runs if (k := command_key(run))))


def before_commit(bite: str) -> str:
    """A commit hook's lesson as told before a commit: the step, not the checks its refusals named (an edit of the
    hook's configuration may have dropped them since; right after a refusal, the refusal names its own)."""
    step, found, _ = bite.partition(": its ")
    if not found:
        return bite
    return f"{step}: its hook stopped a commit in half or more of the recent sessions that committed."


def dropped_options(ep: Episode) -> list[str]:
    """The options a recipe's steps ran its command with that the command it ends on, clean, no longer has
    (BookMinder's `uv venv`: `-p .uvenv`, then `--path .uvenv`, then `uv venv .uvenv`): a call without them does
    not go the way the recipe went. [] when its way through kept the options (the steps set something up)."""
    clean = next((e[2:] for e in ep.entities if e.startswith("$ ")), "")
    kept = set(asked_with(clean))
    steps = [step for step in ep.summary.split("`")[1::2] if step != clean]
    return list(dict.fromkeys(o for step in steps for o in asked_with(step) if o not in kept))[:5]


KEYS_MARK = hook_io.KEYS_MARK  # the second line: every key the file holds


def _index_text(header: str, lines: list[tuple[str, str]]) -> str:
    """The index file: its header, the line of its keys, then a line per key (each key a JSON string, its
    entries a JSON list), the last ones left out while it is over ``INDEX_LIMIT`` bytes (the keys of the
    oldest memories were filed last)."""
    lines = list(lines)
    while True:
        keys = KEYS_MARK + "".join(f"{key}\t" for key, _ in lines)
        text = "\n".join([header, keys, *(f"{key}\t{listed}" for key, listed in lines)]) + "\n"
        if len(text) <= INDEX_LIMIT or not lines:
            return text
        lines.pop()


class LessonIndex:
    """Writes and refreshes the per-project index files in the recollections folder."""

    def __init__(self, recollections_dir: Path) -> None:
        self.folder = recollections_dir / FOLDER
        self._signatures: dict[str | None, tuple] = {}  # project → what its memories looked like when written

    def path(self, project: str | None) -> Path:
        return self.folder / index_name(project)

    def refresh(self, conn, project: str | None, root: str | None) -> str:
        """Bring the project's index up to date if its memories changed; returns the file's name."""
        # The project's last sessions here (another machine's are not in this table): what they committed and
        # pushed — read through the sessions' index, so that a push is seen at the next prompt.
        recent = tool_calls_sql.project_sessions_with_calls(conn, project, UNPUSHED_SESSIONS) if project else []
        pushes = tool_calls_sql.clean_calls_saying(conn, recent, GIT_STATE_CALLS)
        stopping = tool_calls_sql.calls_stopping(conn, recent, STOP_TOOLS, "kill")
        signature = (episodes_sql.memories_signature(conn, project), failures_sql.stamp(conn, project),
                     pushes[0].tool_use_id if pushes else None, stopping[-1].tool_use_id if stopping else None)
        name = index_name(project)
        if self._signatures.get(project) == signature and (self.folder / name).exists():
            return name
        memories = episodes_sql.project_memories(conn, project, SCANNED)
        fixes: dict[str, list[FailureSignature]] = {}
        for row in failures_sql.with_memories(conn, project):
            if row.memory_id:
                fixes.setdefault(row.memory_id, []).append(row)
        origins = origins_sql.origins(conn, [ep.id for ep in memories])
        signalled = [ep for ep in memories if origins.get(ep.id) == "signal"]
        left = unpushed([c for ep in signalled if (c := commit_of(ep))], pushes, set(recent))
        # What the last sessions here started in the background and nothing stopped since.
        starts = [s for ep in signalled if (s := start_of(ep)) and s.session_id in recent]
        running = left_running(starts, stopping)
        together = told_together(running, tool_calls_sql.last_call_times(
            conn, list(dict.fromkeys(s.session_id for s in running if s.session_id))))
        running_entries = [_left_running_entry(*together)] if together else []
        # A local override the last sessions wrote and left: before a call that starts a server reading it.
        written = [w for ep in signalled if (w := written_of(ep, root))]
        running_entries += [_override_entry(o, runs) for o in left_in_place(written, recent)
                            if (runs := started_there(o, starts))]
        # What the project runs for each job (its linter, its test runner), from its clean calls naming one.
        named = tool_calls_sql.clean_calls_naming(conn, project, tuple(sorted(PROGRAMS))) if project else []
        tools = _tool_entries(project_tools(named), {p for command, _ in named for p in programs_of(command)})
        self.write(project, root, memories, fixes, origins, environment_programs(conn, project, fixes), left,
                   running_entries, tools)
        self._signatures[project] = signature
        if len(self._signatures) > 1_000:  # one entry per project: only a store of many projects trims it
            self._signatures.pop(next(iter(self._signatures)))
        return name

    def write(self, project: str | None, root: str | None, memories: list[Episode],
              fixes: dict[str, list[FailureSignature]] | None = None, origins: dict[str, str] | None = None,
              environments: dict[str, set[str]] | None = None, left: dict[str, list[Commit]] | None = None,
              running: list[tuple[dict, list[str]]] | None = None,
              tools: list[tuple[str, dict]] | None = None) -> Path:
        """Write the project's index. `environments`: the programs the project ran after each activation a fix
        starts with (``environment_programs``); `left`: each branch's commits no session pushed (``unpushed``);
        `running`: what a session left running in the background, each with the keys it is told under; `tools`:
        what the project runs for a job, under the failure of another program of it."""
        filed: dict[str, list[dict]] = {}
        borrowed: list[tuple[str, dict]] = []  # "not found" fixes that answer another program's "not found"
        guarded: list[str] = []  # rules told before the calls that would break them: not at a session's start
        environment: tuple[str, list[str]] | None = None  # where the project's tools run: its set-up, its programs
        told = 0
        fixes, origins, environments = fixes or {}, origins or {}, environments or {}
        # The project's own name (`cipherbox` of cipher-box) is in every call that names its repository or folder: a
        # fact filed under it would be told at any of them.
        own_names = {name_key(path.rstrip("/").rsplit("/", 1)[-1]) for path in (project, root) if path}
        for ep in memories:  # newest first
            origin = origins.get(ep.id)
            if told >= MAX_BITES or not pushable(ep, origin):
                continue
            # The session it was learned in: that session has it in its context already and is not told.
            # A recipe's steps, a user's rule and what did a missing program's job are told whole (the rule up to
            # a digest line's length).
            room = RECIPE_ROOM if origin in ("recipe", "standing", "absent", "declined", "settled") else BITE_CHARS
            entry = {"id": ep.id, "bite": bite_of(ep, room),
                     "date": utc_date(ep.created_at),
                     "importance": ep.importance, "kind": ep.kind, "session": ep.session_id}
            if origin == "recipe" and (dropped := dropped_options(ep)):
                entry["asked"] = dropped  # before a call given the options its way through dropped, not every call
            if origin == "file":  # how the user wants a file worked on: told when it is changed, not read
                entry["on"] = list(hook_io.EDITING)
            elif origin == "tool_limit":  # a file too big for the read tool: told before a read, not a `git add`,
                entry["on"] = list(hook_io.READING)  # and not before one that reads a part of it (`limit`)
                entry["unless"] = ["limit"]
                refused = filed.setdefault(hook_io.READ_REFUSED, [])
                if ep.entities and len(refused) < IDS_PER_KEY:  # and right after a read of another file is refused
                    refused.append({**entry, "file": ep.entities[0]})
            placed = False
            keys = [k for k in keys_by_origin(ep, origin, root) if k not in own_names]
            guards = guards_of(ep, origin)
            on_branch = branch_guards_of(ep, origin)
            if guards or on_branch:  # a rule that forbids a command: told before a call that breaks it, not every one
                keys = [k for k in keys if not _covered(k, guards + [(key, ()) for key, _ in on_branch])]
                for key, when in guards:
                    entries = filed.setdefault(key, [])
                    if len(entries) < IDS_PER_KEY:
                        entries.append({**entry, "when": list(when)} if when else entry)
                        placed = True
                for key, branch in on_branch:  # "no commits directly to main": before a commit while on `main`
                    entries = filed.setdefault(key, [])
                    if len(entries) < IDS_PER_KEY:
                        entries.append({**entry, "branch": [branch]})
                        placed = True
                if placed and len(guarded) < hook_io.GUARDED_SHOWN:
                    guarded.append(ep.id)
            if origin == "environment":  # where the project's tools run: told right after one is not found
                activation = next((e[2:] for e in ep.entities if e.startswith("$ ")), "")
                if activation and environment is None:  # the newest
                    environment = (activation, [e for e in ep.entities if not e.startswith("$ ")])
                for program in (e for e in ep.entities if not e.startswith("$ ")):
                    for name in names_run_as(program):  # `pip` is run as `pip3` outside the environment
                        fails = filed.setdefault("fail:" + name, [])
                        if len(fails) < FIXES_PER_KEY:
                            fails.append({**entry, "sig": missing_signatures(name), "ran": activation})
                            placed = True
                told += placed
                continue
            if origin == "declined":  # a hook bypass the user declined: told before a call that would skip them again
                for key in HOOKED_KEYS:
                    entries = filed.setdefault(key, [])
                    if len(entries) < IDS_PER_KEY:
                        entries.append({**entry, "bypass": True})
                        placed = True
                told += placed
                continue
            if origin == "settled":  # the variables a command came to be run with: before a run without them
                core = next((e[2:] for e in ep.entities if e.startswith("$ ")), "")
                key = command_key(core) if core else None
                entries = filed.setdefault(key, []) if key else []
                if key and len(entries) < IDS_PER_KEY:
                    entries.append({**entry, "core": core, "vars": [e for e in ep.entities if not e.startswith("$ ")]})
                    told += 1
                continue
            if origin == "absent":  # a program not installed where the project runs: told right after it is not found
                fails = filed.setdefault("fail:" + ep.entities[0], []) if ep.entities else []
                if ep.entities and len(fails) < FIXES_PER_KEY:
                    # and before a call that runs it, when the user said something of it then ("you dont have access
                    # to docker here"): their words hold whatever the shell has by now
                    said = {"before": True} if any(e.startswith(USER_SAID) for e in ep.entities) else {}
                    fails.append({**entry, "sig": missing_signatures(ep.entities[0]), **said})
                    told += 1
                continue
            ways = fixes.get(ep.id, [])
            if ways and any(missing_paths(fix.fix or "", root) for fix in ways[:1]):
                continue  # what fixed it names a folder the project no longer has (its old virtualenv): gone stale
            for fix in ways[:SIGNATURES_PER_FIX]:  # each way of failing it tells the fix of, under its failure key
                fails = filed.setdefault(fix.fail_key, [])
                if len(fails) < FIXES_PER_KEY:
                    fails.append({**entry, "sig": fix.signature, "fix": fix.fix or ""})
                    placed = True
                borrowed += _answers_elsewhere(entry, fix, environments)
            if ways and ep.kind == "gotcha" and all(fixed_by_editing(fix.fix) for fix in ways):
                # Got past by changing a file named by a number, and the session said why (a commit hook's check
                # of `12.2-CONTEXT.md`): told before the next file of its kind is written, from the same template.
                for path in (e for e in ep.entities if " " not in e and path_like(e)):
                    kind = kind_key(relative(path, root))
                    entries = filed.setdefault(kind, []) if kind else []
                    if kind and len(entries) < IDS_PER_KEY and all(e["id"] != ep.id for e in entries):
                        bite = _of_its_kind(ep, path, ways[0].call_key, entry)
                        entries.append({**entry, "on": list(hook_io.EDITING), "bite": bite})
                        placed = True
            if ways:
                uses = next((fix.uses for fix in ways if fix.uses), None)
                if uses:
                    entry = {**entry, "uses": uses}  # before the call: not when the call already applies it
                failed = next((e[2:] for e in ep.entities if e.startswith("$ ")), None)
                quiet = bool(failed and all(ran_nothing(fix.signature) for fix in ways) and asked_with(failed))
                if quiet:
                    # A test run that ran nothing failed by how it was asked: told before a run asked the same way
                    # (`--testPathPattern`), not before every run of the tests — from the first time: its call
                    # exited 0, so no failure hook sees it fail again (cipher-box met it in three sessions untold).
                    entry = {**entry, "asked": asked_with(failed)}
                if not (quiet or worth_telling_before(ways)) or all(of_the_moment(fix.signature) for fix in ways) \
                        or all(fixed_by_editing(fix.fix) or of_the_shell(fix) for fix in ways):
                    # Before the call only once it recurred, in most sessions that ran the command; never a fix that
                    # changed the project's files (the change is there now: only its failure says it was undone),
                    # nor one of the program itself not found (the shell may have it now: a PATH set in the
                    # user's profile, an environment already active; only its failure says it has not).
                    keys = [k for k in keys if not k.startswith("cmd:")]
            step_only = is_hook_lesson(ep.id, project)
            for key in keys:
                entries = filed.setdefault(key, [])
                if len(entries) < IDS_PER_KEY:
                    entries.append({**entry, "bite": before_commit(entry["bite"])}
                                   if step_only and key.startswith("cmd:") else entry)
                    placed = True
            if step_only and placed:
                # A session that runs the step itself knows it (BookMinder 05-30 ran `pre-commit run --all-files`,
                # then committed): a call running it marks the lesson known there, and no commit after is told it.
                for key in dict.fromkeys(k for step in _STEP.findall(entry["bite"]) for k in command_keys(step, root)):
                    if key.startswith("cmd:") and key not in keys:
                        filed.setdefault(key, []).append({"id": ep.id, "marks": True, "session": ep.session_id})
            told += placed
        for branch, commits in (left or {}).items():  # told before a pull into the branch
            filed.setdefault("pull:" + branch, []).append(_unpushed_entry(branch, commits))
        for entry, keys in running or []:  # told before a call that starts one of them again
            for key in keys:
                filed.setdefault(key, []).insert(0, entry)
        for key, entry in tools or []:  # after the program's own fixes (a `biome` the user said is not here)
            fails = filed.setdefault(key, [])
            if len(fails) < FIXES_PER_KEY:
                fails.append(entry)
        for key, answer in borrowed:  # newest fix first; never beside the program's own fix of that failure
            fails = filed.setdefault(key, [])
            if len(fails) < FIXES_PER_KEY and not any(same_failure(e.get("sig", []), answer["sig"]) for e in fails):
                fails.append(answer)
        if environment is not None:
            for entries in filed.values():
                for entry in entries:
                    inside_environment(entry, *environment)
        header = json.dumps({"project": project, "root": root, "at": now_ms(), "guarded": guarded})
        ensure_private_dir(self.folder.parent)
        ensure_private_dir(self.folder)
        path = self.path(project)
        write_atomic(path, _index_text(header, [(json.dumps(key), json.dumps(entries))
                                                for key, entries in filed.items()]))
        return path

    def drop(self, ids: set[str] | frozenset[str]) -> int:
        """Take these memories out of every index (a forget); returns how many files were rewritten."""
        rewritten = 0
        try:
            entries = [e for e in os.scandir(self.folder) if e.name.endswith(SUFFIX) and not e.name.startswith(".")]
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                lines = Path(entry.path).read_text(encoding="utf-8").splitlines()
            except OSError:
                continue
            kept: list[tuple[str, str]] = []
            changed = False
            for line in lines[1:]:
                if line.startswith(KEYS_MARK):
                    continue
                key, _, listed = line.partition("\t")
                try:
                    found = json.loads(listed)
                    filed = [e for e in found if e.get("id") not in ids]
                except (ValueError, AttributeError):
                    continue
                changed = changed or len(filed) != len(found)
                if filed:
                    kept.append((key, json.dumps(filed)))
            if changed and lines:
                write_atomic(Path(entry.path), _index_text(lines[0], kept))
                rewritten += 1
        for project in list(self._signatures):
            self._signatures.pop(project)  # the next refresh rewrites from the store
        return rewritten
