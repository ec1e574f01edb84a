"""Lessons a session taught, found without an LLM: a failure, and what got past it.

Sessions learn in a recognisable shape. A call fails (its tool result is marked ``is_error``); something
changes — the command (``git push`` → ``git push --set-upstream origin feat``), a step run first (``git add``
the files a pre-commit hook rewrote, ``source .venv/bin/activate``), a file; the same call then gets past that
failure and the round ends with it running clean. Often the assistant says why in between ("the issue is that
…", "`dist/` is git-ignored, so …": ``processor/memory/diagnosis.py``); often it does not, and then the error and
the call that worked *are* the lesson. Each failure is known by its signature (``processor/memory/failed_calls.py``),
so the same failure in a later session meets what fixed it: the PostToolUseFailure hook tells it right after the
failure, and once it has recurred the PreToolUse hook tells it before the call
(``processor/recall/lesson_index.py``); ``memory_recall`` finds it by the error's words.

Kinds:
- ``gotcha``: the fix was a way of running things here (a changed command, a step first), or a diagnosis that
  names a tool's or platform's constraint ("SQLite doesn't support …"): it bites again; one memory per way of
  failing, per project (origin ``error_fix``);
- ``bugfix``: the fix was an edit of the project's own code, with its cause said ("the issue is that …"):
  recalled when asked about, never pushed at a later session (the code has moved on; a test written first that
  fails until the code exists is the work in progress, not a lesson) (origin ``lesson``).

No lesson is made from:
- a failure never got past in its round, or a flaky one (the same command passed with nothing changed);
- a call the user declined or interrupted, the editor's own mechanics, an error that says nothing but "Error"
  (``failed_calls.failures_of``);
- narration ("Let me …"), a question, or a sentence too thin to stand alone, as a diagnosis.

A round's lessons also hold, first, its recipe (``processor/memory/recipes.py``) and the staging it had to undo
(``processor/memory/staging.py``): at most ``MAX_LESSONS_PER_ROUND`` in all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processor.hook_kit.failure_keys import CD_REFUSED, call_signature, failed_cd, refused_cd, same_failure
from processor.hook_kit.tool_keys import command_keys, path_like, relative
from processor.memory.bites import fit
from processor.memory.command_text import command_shown, command_told
from processor.memory.commit_hooks import HOOK_RUNNERS, HookFailure, hook_failure
from processor.memory.diagnosis import LESSON_CHARS, diagnosis_in, names_a_tool
from processor.memory.failed_calls import Failure, failures_of, inspects, same_call, stages_only
from processor.memory.findings import FailureFix, Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.recipes import recipe_of
from processor.memory.staging import undone_staging
from processor.redaction import redact
from processor.store.episodes import StoredMessage
from processor.store.tool_calls import StoredToolCall

FIX_CHARS = 240  # what fixed a failure, in a line
_EDITS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
MAX_LESSONS_PER_ROUND = 3


@dataclass(frozen=True)
class Fix:
    """What resolved a failure: the call that no longer failed that way and what changed before it."""

    failure: Failure
    resolved_by: StoredToolCall
    setup: list[str]  # commands run between the failure and the call that got past it
    edits: list[str]  # files changed meanwhile
    changed_command: bool
    diagnosis: tuple[str, str, StoredMessage] | None  # (kind, sentence, message) said in between

    @property
    def added(self) -> tuple[str, ...]:
        """The words the fix brought to the command: its setup steps' and the changed command's words that the
        failed one lacked (paths by their last part: ``.venv/bin/activate`` and ``venv/bin/activate`` alike)."""
        had = _words(self.failure.call.target or "")
        new = [w for step in (*self.setup, self.resolved_by.target or "") for w in _words(step) if w not in had]
        return tuple(dict.fromkeys(new))[:6]

    def how(self, root: str | None) -> str:
        """What fixed it, in a line: the setup, then the changed (or same) command (`root`: the project's folder);
        files changed on the way first (``changing `pytest.ini`, then `pytest --spec` ran clean``)."""
        command = f"`{command_told(self.resolved_by.target, root=root)}`"
        steps = [f"`{command_told(step, 80, root)}`" for step in self.setup[:3]]
        if self.edits and not steps:
            changed = EDIT_FIX + ", ".join(f"`{relative(e, root)}`" for e in self.edits[:3])
            # The same command again is not news (a `git add` of five files and a commit): that it ran clean is.
            return f"{changed}, then {command}" if self.changed_command else f"{changed}; then the command ran clean"
        if steps:
            return ", then ".join(steps) + f", then {command}" + ("" if self.changed_command else " again")
        failed = " ".join(command_told(self.failure.call.target, 10_000, root).split())
        again = " ".join(command_told(self.resolved_by.target, 10_000, root).split())
        if self.resolved_by.failed and failed and again.endswith(failed) and again != failed:
            # The go that got past this failure failed another way: the step it added is the fix, not the command
            # (`export PATH=… && uv venv -p .uvenv` found uv, and uv refused `-p .uvenv`) — said without that other
            # failure, which is not this one's (a reader: "the closing clause only confuses").
            step = again[:-len(failed)].rstrip().removesuffix("&&").rstrip()
            return f"`{command_told(step, 120, root)}` first"
        return command


EDIT_FIX = "changing "  # how a fix that changed the project's files begins


def fixed_by_editing(fix: str | None) -> bool:
    """Whether a fix (as ``Fix.how`` says it) changed the project's files: the change is in the project now, so
    the failure comes back only if it is undone — told right after it, never before the command."""
    return (fix or "").startswith(EDIT_FIX)


def _words(command: str) -> list[str]:
    """A command's words as a fix is compared by: no separators, a path by its last part."""
    return [w.rstrip("/").rsplit("/", 1)[-1] for w in command.split() if w not in ("&&", "||", ";", "|", "cd")
            and not w.startswith(("'", '"'))]


def _fix(failure: Failure, later: list[StoredToolCall], replies: list[StoredMessage],
         hooked: bool = False) -> Fix | None:
    """What got past `failure` later in its round, when the round ends with the same call running clean: the
    first go at it that ran clean, or that kept the failed command whole and added to it (a step first: it got
    past this failure, whatever failed next); retries that fail the same way, and calls that only read about the
    program (``--help``), are passed over. None when it was never fixed, or when nothing changed on the way (a
    flaky rerun of the same command passed: nothing to learn) — unless a commit hook stopped it (`hooked`): its
    checks rewrote the files the same `git add … && git commit` staged again, and its refusal is the lesson."""
    tries = [i for i, c in enumerate(later) if same_call(failure.call, c, failure.key) and not inspects(c)]
    if not any(not later[i].failed for i in tries):
        return None  # never ran clean in the round
    core = command_shown(failure.call.target, 10_000)
    resolved = None
    for i in tries:
        call = later[i]
        if not call.failed:
            resolved = i
            # Another go right after it, clean too: the session was not done (a `| tail` hid jest's "Can't find a
            # root directory"); what it went on to is what it settled on. Not past a go that began with a `cd`:
            # the shell stays there, so the goes after it ran there without saying so (`cd apps/api && node -e …`,
            # then `node -e …` with another user).
            while resolved + 1 in tries and not later[resolved + 1].failed \
                    and not (later[resolved].target or "").lstrip().startswith("cd "):
                resolved += 1
            break
        if call.error and same_failure(call_signature(call.tool, call.target, call.error), failure.signature):
            continue  # a retry: the same failure again
        if core and core in (call.target or "") and core != command_shown(call.target, 10_000):
            resolved = i  # the command whole, with a step added: it got past this failure
            break
    if resolved is None:
        return None
    # The failed command itself ran clean later in the round: another way of running it was not what got past
    # the failure (a `pytest.ini` edit made `pytest specs/` find the specs); what changed before it is.
    failed_as_run = " ".join((failure.call.target or "").split())  # whole: a script's lines, a `cd` first
    again = next((i for i in tries if i > resolved and not later[i].failed
                  and " ".join((later[i].target or "").split()) == failed_as_run), None)
    resolved = resolved if again is None else again
    by, between = later[resolved], [c for i, c in enumerate(later[:resolved]) if i not in tries]  # not other goes
    setup = [c.target for c in between if c.tool == "Bash" and not c.failed and c.target and not inspects(c)
             and any(k.startswith("cmd:") for k in command_keys(c.target))]
    edits = list(dict.fromkeys(c.target for c in between if c.tool in _EDITS and c.target and not c.failed))
    changed = " ".join((by.target or "").split()) != " ".join((failure.call.target or "").split())
    if not (setup or edits or changed or hooked):
        return None
    failed_at = failure.call.result_ts_ms or failure.call.ts_ms or 0
    said = [m for m in replies if failed_at < (m.ts_ms or 0) <= (by.ts_ms or 0)]
    return Fix(failure, by, setup, edits, changed, diagnosis_in(said))


def findings(round_: Round) -> list[Finding]:
    """The lessons of one round (its messages, and the session's tool calls made during it): the staging it had to
    undo, its recipe, then what fixed its failures."""
    in_round = round_.in_round
    if not round_.messages or not in_round:
        return []
    replies = [m for m in round_.messages if m.role == "assistant" and m.ts_ms is not None]
    failures = failures_of(in_round)
    recipe = recipe_of(failures, in_round, replies, round_.project)
    lessons: list[Finding] = undone_staging(in_round, round_.project)[:1] + ([recipe] if recipe else [])
    first = {lesson.id for lesson in lessons}
    learned: dict[str, Finding] = {}  # by id: the same way of failing met again later in the round replaces it
    for failure in failures:
        hook = hook_failure(failure.call.target, failure.call.error)
        fix = _fix(failure, in_round[in_round.index(failure.call) + 1:], replies, hooked=hook is not None)
        if fix is None:
            continue
        if hook is not None and (hook.rewrote_files or not said_why_it_failed(fix)):
            lesson = _hook_lesson(fix, hook, round_.project)
        elif retry_only(fix) or wrong_path(fix):
            continue  # what every session does anyway (re-stage, run it again; type the path right): no lesson
        else:
            lesson = _lesson(fix, round_.project, hooked=hook is not None)
        if lesson is None or lesson.id in first or any(lesson.summary == other.summary for other in learned.values()):
            continue
        if lesson.id not in learned and len(lessons) + len(learned) >= MAX_LESSONS_PER_ROUND:
            continue
        # The same failure came back and the session got past it again: what got past it the first time did not
        # hold (one spec file run by name; `pytest specs/` still collected nothing until `pytest.ini` said where
        # the specs are). The way the round settled on is the lesson.
        learned.pop(lesson.id, None)
        learned[lesson.id] = lesson
    return lessons + list(learned.values())


# What an error says when a path the command named does not exist: the command was mistyped, not the project.
_MISSING_PATH = re.compile(r"pathspec .* did not match|no such file or directory|cannot access|does not exist|"
                           r"not found in (?:the )?(?:index|working tree)|no matches found", re.IGNORECASE)
# What to do when the shell was not where the command expected: it keeps its working directory between calls, so
# a relative path that worked from the project's folder fails after an earlier `cd` moved it.
_CD_FIX = ("run it from the project's folder (`cd` there first) or with absolute paths: an earlier `cd` had moved "
           "the shell")


def said_why_it_failed(fix: Fix) -> bool:
    """The session got past a commit hook's check by changing the files it checked, and said why they failed it
    ("the `<domain>` wrapper tags confuse the markdown linter"): that is the lesson, not running the check first
    (its own run would have failed the same way)."""
    return fix.diagnosis is not None and bool(fix.edits) and all(stages_only(step) for step in fix.setup)


def retry_only(fix: Fix) -> bool:
    """A fix whose only change is running the same command again (after staging, or prefixed with staging): every
    agent retries anyway, so a later session learns nothing from being told it."""
    if fix.edits or any(not stages_only(step) for step in fix.setup):
        return False
    failed = " ".join((fix.failure.call.target or "").split())  # as run: a `cd` first is a change of where
    again = " ".join((fix.resolved_by.target or "").split())
    tail = [seg.strip() for seg in re.split(r"&&|;", again) if seg.strip()]
    while tail and stages_only(tail[0]) and " ".join(tail[0].split()) != failed:
        tail = tail[1:]
    return " ".join(" && ".join(tail).split()) == failed or not fix.changed_command


def cd_moved(fix: Fix) -> bool:
    """The shell was not where the command expected: a relative `cd` failed from a folder an earlier `cd` had moved
    it to, or a path the command named was missing and what worked was the same command after a `cd` back."""
    error = fix.failure.call.error or ""
    if failed_cd(error.lower()):
        return True
    if not _MISSING_PATH.search(error) or (fix.failure.call.target or "").lstrip().startswith("cd "):
        return False
    return (fix.resolved_by.target or "").lstrip().startswith("cd ") or any(
        step.lstrip().startswith("cd ") and "&&" not in step for step in fix.setup)


def wrong_path(fix: Fix) -> bool:
    """The command named a path that is not there and the session typed it right (only paths changed, nothing was
    set up): a slip of that one session, not something of the project to learn. Not a `cd` that failed because the
    shell was elsewhere: that one comes back (``cd_moved``)."""
    error = fix.failure.error_line or fix.failure.call.error or ""
    if not _MISSING_PATH.search(error) or fix.edits or cd_moved(fix):
        return False
    if any(not stages_only(step) for step in fix.setup):
        return False
    return all(path_like(word) for word in fix.added)


def hook_lesson_id(project: str | None, runner: str) -> str:
    """The memory of a project's commit hook run by `runner` (one a project and runner)."""
    return episode_id(f"commit-hook:{project}:{runner}")


def is_hook_lesson(memory_id: str, project: str | None) -> bool:
    """Whether a memory is the one of a project's commit hook."""
    return any(memory_id == hook_lesson_id(project, runner) for runner in HOOK_RUNNERS)


def _hook_lesson(fix: Fix, hook: HookFailure, project: str | None) -> Finding:
    """The memory a commit hook's refusal makes: the step that avoids it (run what the hook runs first), not the
    retry that got past it. One a project and hook runner: every way its checks stopped a commit links to it."""
    failure = fix.failure
    command = command_told(failure.call.target, root=project) or "git commit"
    summary = fit(hook.lesson() + ".", LESSON_CHARS)
    lines = [summary, f"Failed: `{command}` — {failure.error_line}" if failure.error_line else f"Failed: `{command}`",
             f"That time it got past with {fix.how(project)}."]
    step = f"run `{hook.run_first}` before committing" if hook.run_first else "run the hook's checks before committing"
    step += " and stage what it changes" if hook.modified or hook.runner == "pre-commit" else ""
    sources = [u for u in (failure.call.use_uuid, failure.call.result_uuid, fix.resolved_by.use_uuid) if u]
    uses = tuple(word for word in (hook.run_first or "").split()[:2] if word not in ("run", "npx"))
    return Finding(id=hook_lesson_id(project, hook.runner), kind="gotcha", summary=redact(summary),
                   full_content=redact("\n".join(lines)), entities=[redact(f"$ {command}"), *map(redact, hook.checks)],
                   source_uuids=list(dict.fromkeys(sources)), created_at=failure.call.ts_ms, miner="error_fix",
                   scope=scope_for(None, project),
                   failure=FailureFix(key=failure.fail_key, signature=tuple(failure.signature),
                                      fix=redact(fit(step, FIX_CHARS)), uses=uses, session_fixed=True))


def _lesson(fix: Fix, project: str | None, hooked: bool = False) -> Finding | None:
    """The memory a fix makes. A changed command or a setup step is a way of working here (``gotcha``: told when
    the failure comes back, and before the call once it recurs). A fix by editing files is the work itself: a
    lesson only when the session said why, and a ``gotcha`` only when that names a tool's constraint (SQLite
    does not support …), or the project's commit hook's (`hooked`: it will refuse the same way again); the
    project's own code missing something is work in progress (``bugfix``)."""
    failure, diagnosis = fix.failure, fix.diagnosis
    if not (fix.setup or fix.changed_command):
        if diagnosis is None:
            return None
        kind = "gotcha" if diagnosis[0] == "gotcha" and (hooked or names_a_tool(diagnosis[1])) else "bugfix"
    else:
        kind = "gotcha"
    # The harness refused the `cd`: it is what the lesson is about.
    refused = failure.fail_key == CD_REFUSED and refused_cd((failure.call.error or "").lower())
    command = command_told(failure.call.target, root=project, keep_cd=refused) or failure.call.tool
    how = fix.how(project)
    if diagnosis is not None:
        summary = diagnosis[1]
    elif refused:
        summary = fit(f"Here `cd` may only go below the session's folder: `{command}` was refused. What worked "
                      f"instead: {how}.", LESSON_CHARS)
    elif cd_moved(fix):  # the lesson is the shell's, not this command's
        summary = fit(f"The shell keeps its working directory between calls: `{command}` failed "
                      f"({failure.error_line}) because an earlier `cd` had moved it; run commands from the project's "
                      "folder (`cd` to it first) or with absolute paths.", LESSON_CHARS)
    else:
        summary = fit(f"`{command}` failed: {failure.error_line} What fixed it: {how}.", LESSON_CHARS)
    lines = [summary, f"Failed: `{command}`" + (f" — {failure.error_line}" if failure.error_line else "")]
    if fix.edits and fix.changed_command is False and not fix.setup:
        lines.append("Fixed by " + how + ".")
    else:
        then = command_told(fix.resolved_by.target, root=project)
        lines.append(f"What fixed it: {how}." + ("" if fix.resolved_by.failed else f" Then `{then}` ran clean."))
        if fix.edits:
            lines.append("Changed meanwhile: " + ", ".join(f"`{path}`" for path in fix.edits[:5]) + ".")
    entities = [f"$ {command}", *fix.edits[:5]]
    if failure.error_line:
        entities.append(failure.error_line[:80])
    said = diagnosis[2] if diagnosis else None
    sources = [u for u in (failure.call.use_uuid, failure.call.result_uuid, said.uuid if said else None,
                           fix.resolved_by.use_uuid) if u]
    # A way of working is one memory per way of failing, in each project: the same failure in another session
    # (or a rebuild) finds it, one the user marked wrong is never made again, and one gone stale is made again
    # with the new way a later session found (``episodize``). Work fixed by edits is one memory per failure.
    seed = (f"fix:{project}:{failure.fail_key}:{failure.signature[0]}" if kind == "gotcha"
            else f"lesson:{failure.call.tool_use_id}")
    # Linked to its failure (told right after it) when the session got past it by a step, or past its commit
    # hook's check by changing what it checked; work fixed by edits is the project's own.
    session_fixed = bool(fix.setup or fix.changed_command or hooked)
    return Finding(id=episode_id(seed), kind=kind, summary=redact(summary), full_content=redact("\n".join(lines)),
                   entities=[redact(e) for e in entities], source_uuids=list(dict.fromkeys(sources)),
                   created_at=(said.ts_ms if said else None) or failure.call.ts_ms,
                   miner="error_fix" if session_fixed else "lesson", scope=scope_for(None, project),
                   failure=FailureFix(key=failure.fail_key, signature=tuple(failure.signature),
                                      fix=redact(fit(_CD_FIX if cd_moved(fix) else how, FIX_CHARS)),
                                      uses=() if cd_moved(fix) else fix.added, session_fixed=session_fixed))
