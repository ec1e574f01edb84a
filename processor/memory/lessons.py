"""Lessons a session taught, found without an LLM: a failure, and what got past it.

Sessions learn in a recognisable shape. A call fails (its tool result is marked ``is_error``); something
changes — the command (``git push`` → ``git push --set-upstream origin feat``), a step run first (``git add``
the files a pre-commit hook rewrote, ``source .venv/bin/activate``), a file; the same call then gets past that
failure and the round ends with it running clean. Often the assistant says why in between ("the issue is that
…", "`dist/` is git-ignored, so …"); often it does not, and then the error and the call that worked *are* the
lesson. Each failure is known by its signature (``processor/hook_kit/failure_keys.py``: its program, its error lines
with paths, numbers and names masked), so the same failure in a later session meets what fixed it: the
PostToolUseFailure hook tells it right after the failure, and once it has recurred the PreToolUse hook tells it
before the call (``processor/recall/lesson_index.py``); ``memory_recall`` finds it by the error's words.

Kinds:
- ``gotcha``: the fix was a way of running things here (a changed command, a step first), or a diagnosis that
  names a tool's or platform's constraint ("SQLite doesn't support …"): it bites again; one memory per way of
  failing, per project;
- ``bugfix``: the fix was an edit of the project's own code, with its cause said ("the issue is that …"):
  recalled when asked about, never pushed at a later session (the code has moved on; a test written first that
  fails until the code exists is the work in progress, not a lesson).

No lesson is made from:
- a failure never got past in its round, or a flaky one (the same command passed with nothing changed);
- a call the user declined or interrupted (its "error" is then the user's choice or words), the editor's own
  mechanics (an edit whose text was not found), an error that says nothing but "Error";
- narration ("Let me …"), a question, or a sentence too thin to stand alone, as a diagnosis.
English cues for the diagnosis only: an error in another language still has its signature and its fix.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from processor.hook_kit.failure_keys import another_go, call_key, failure_key, not_a_failure, same_failure
from processor.hook_kit.failure_keys import signature as failure_signature
from processor.hook_kit.tool_keys import command_keys
from processor.memory.bites import fit
from processor.memory.sentences import units
from processor.memory.statements import is_narration, prose, word_count
from processor.redaction import redact
from processor.store.episodes import StoredMessage
from processor.store.tool_calls import StoredToolCall

LESSON_CHARS = 300  # the diagnosis sentence, at most
FIX_CHARS = 240  # what fixed a failure, in a line
_EDITS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
ERROR_LINE_CHARS = 160
MIN_WORDS = 6
MAX_LESSONS_PER_ROUND = 3

# A constraint of a tool, platform or repository: it will fail the same way again.
_CONSTRAINT = re.compile(
    r"\b(?:doesn't|does not|don't|do not|can't|cannot|can not|won't|will not|isn't|is not|aren't|are not)\s+"
    r"(?:\w+\s+)?(?:support|allow|accept|handle|recogni[sz]e|understand|work with|work on|work in|run|resolve|"
    r"find|available|installed|exist|serve|permit|like)\w*\b"
    r"|\bnot (?:supported|allowed|available|installed|permitted|recogni[sz]ed)\b"
    r"|\b(?:rejects?|refuses?)\b|\b(?:git-?)?ignored\b|\.gitignore\b|\bgitignore[sd]?\b"
    r"|\bonly (?:works?|supports?|accepts?|runs?)\b|\brequires?\b|\bmust (?:be|have|use|run)\b"
    r"|\bneeds? to be (?:run|installed|built|set|added|enabled|configured|committed|forced?)\b"
    r"|\blimitation\b|\bincompatible\b|\bdeprecated in\b|\bno longer (?:supports?|works?|accepts?)\b"
    r"|\b(?:has|have|having)\s+(?:an?\s+|some\s+)?(?:issues?|problems?|troubles?|bugs?)\s+with\b|\bfalse positives?\b"
    r"|\b(?:expects?|wants?) (?:a|an|the)\b", re.IGNORECASE)
# The cause of a failure.
_CAUSE = re.compile(
    r"\b(?:the|this|that)\s+(?:(?:real|actual|root|main)\s+)?(?:issue|problem|error|failure|bug|cause|culprit|"
    r"reason)s?\s+(?:is|was|here is|seems to be|appears to be)\b"
    r"|\b(?:fail(?:s|ed|ing)?|breaks?|broke|crash(?:es|ed)?|errors? out)\s+because\b|\broot cause\b"
    r"|\bturns out\b|\bthat's why\b|\bwhich is why\b|\bcaused by\b|\bbecause\b", re.IGNORECASE)
# Leading interjections that carry nothing: "Ah! ", "Perfect! ", "I see. ", "You're absolutely right! ".
_FLUFF = re.compile(r"^(?:(?:ah+|oh|ok(?:ay)?|great|perfect|excellent|good|i see|hmm+|right|aha|interesting|"
                    r"you're (?:absolutely )?right|good catch|got it|found it|now i see)[!.,:]\s*)+", re.IGNORECASE)
# What a sentence is about: a code span, a path or file name, an identifier (snake_case, camelCase, an acronym
# like SQLite), a flag, a quoted name, or a named tool. Case matters for the identifiers.
_SPECIFIC = re.compile(r"`[^`]{2,}`|\b[\w.-]+/[\w./-]+|\b\w+\.[a-z]{1,5}\b|\b[a-z]+_[a-z_]+\b"
                       r"|\b[a-z]+[A-Z]\w*\b|\s--?[a-z][\w-]*|\"[^\"]{2,40}\"|\b[A-Z][a-zA-Z]*[A-Z]\w*\b")
_TOOLS = re.compile(r"\b(?:git|npm|pnpm|yarn|uv|pip|pytest|ruff|mypy|pyright|ty|tsc|eslint|vite|next\.js|vercel|"
                    r"docker|sqlite|postgres(?:ql)?|make|cargo|node|python|bash|zsh|ssh|tmux|act|webpack|jest)\b",
                    re.IGNORECASE)
# An error that is only the user's words: a call the user declined, with what to do instead ("Wait, we need
# to copy X too"). One line of prose with no sign of a program's complaint in it.
_PROGRAM_OUTPUT = re.compile(r"^[\w.-]+: |\*\*\*|\b(?:error|exception|traceback|failed|failure|fatal|warning|denied|"
                             r"not found|no such|exit code|exited|command not found|usage:|errno|panic)\b|[:=]\s*\d"
                             r"|[{}<>|]",
                             re.IGNORECASE)
# A run of one punctuation mark drawn to align a status column ("trim trailing whitespace........Failed", pre-commit's
# and test runners' way): as long as the words it joins, it would push what fixed it out of the bite.
_LEADER = re.compile(r"\s*([.\-=_*#~])\1{3,}\s*")
# A message given to a git command: -m "…", -am '…', --message="…" (quoted; the first line of a multi-line one).
_GIT_MESSAGE = re.compile(r"""((?:^|\s)(?:-[a-zA-Z]*m|--message))(=|\s+)(?:"(?:[^"\\]|\\.)*"?|'[^']*'?)""")
_EDGE_LEADER = re.compile(r"^\s*([.\-=_*#~])\1{3,}\s*|\s*([.\-=_*#~])\2{3,}\s*$")
_ERROR_LINE = re.compile(r"\b(?:error|exception|failed|failure|fatal|denied|not found|no such|cannot|can't|"
                         r"refused|invalid|unknown|unexpected|syntax)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Lesson:
    """One lesson, ready to be stored: its id is stable, so a rebuilt round makes the same one."""

    id: str
    kind: str  # "gotcha" | "bugfix"
    text: str  # the diagnosis, one sentence in the session's own words
    full_content: str  # the sentence, then what failed, how it was fixed
    entities: list[str]
    source_uuids: list[str]
    created_at: int | None
    key: str | None = None  # where the failure is filed (processor/hook_kit/failure_keys.py failure_key)
    signature: tuple[str, ...] = ()  # how it failed, normalised
    fix: str = ""  # what fixed it, in a line: what the failure hook tells right after the same failure
    session_fixed: bool = False  # got past by a way of working (told at the failure), not by editing the code
    miner: str = ""  # the memory origin when not an error's fix or a lesson ("recipe")
    uses: tuple[str, ...] = ()  # the words the fix added to the failed command (a call that has them applies it)


def users_words(error: str | None) -> bool:
    """The 'error' is the user's reply to a declined call, not a program's output."""
    text = (error or "").strip()
    return bool(text) and "\n" not in text and len(text) < 400 and not _PROGRAM_OUTPUT.search(text)


def _clean(sentence: str) -> str:
    return _FLUFF.sub("", prose(sentence)).strip()


# "Let me add a type ignore since `pytest.skip()` is a valid call but ty has issues with it": the action is
# narration, the reason after "since"/"because" is the diagnosis.
_REASON = re.compile(r"\b(?:since|because|as)\s+(?=\S)", re.IGNORECASE)


def reason_of(sentence: str) -> str:
    """The sentence, or of a narrated action the reason it gives."""
    if not is_narration(sentence):
        return sentence
    match = _REASON.search(sentence)
    if match is None:
        return sentence
    reason = sentence[match.end():].strip()
    return reason[:1].upper() + reason[1:]


def diagnosis_kind(sentence: str) -> str | None:
    """gotcha or bugfix when the sentence states a constraint or a cause and can stand alone; else None."""
    if len(sentence) > LESSON_CHARS or sentence.endswith("?") or is_narration(sentence):
        return None
    if word_count(sentence) < MIN_WORDS or not (_SPECIFIC.search(sentence) or _TOOLS.search(sentence)):
        return None
    if _CONSTRAINT.search(sentence):
        return "gotcha"
    if _CAUSE.search(sentence):
        return "bugfix"
    return None


def _diagnosis(messages: list[StoredMessage]) -> tuple[str, str, StoredMessage] | None:
    """The best diagnosis among these assistant messages: a constraint over a cause, the later one first
    (after several tries, the last diagnosis is the one that held)."""
    best: tuple[int, str, str, StoredMessage] | None = None
    for order, message in enumerate(messages):
        for unit in units(message.text, LESSON_CHARS * 2):
            if unit.kind not in ("sentence", "item"):
                continue
            sentence = reason_of(_clean(unit.text.lstrip("-*• ")))
            kind = diagnosis_kind(sentence)
            if kind is None:
                continue
            rank = (2 if kind == "gotcha" else 1) * 1000 + order
            if best is None or rank >= best[0]:
                best = (rank, kind, sentence, message)
    return (best[1], best[2], best[3]) if best else None


def _error_line(error: str | None) -> str:
    """The line of an error output that says what went wrong (the first that names an error), cut."""
    text = (error or "").strip()
    if text[:6].lower() == "error:":
        text = text[6:].lstrip()  # Claude Code's wrapper, not the tool's words
    lines = [line for line in (_without_leaders(" ".join(raw.split())) for raw in text.splitlines()) if line]
    lines = [line for line in lines if not line.lower().startswith(("exit code", "warn"))] or lines
    chosen = next((line for line in lines if _ERROR_LINE.search(line)), lines[0] if lines else "")
    return chosen[:ERROR_LINE_CHARS] + ("…" if len(chosen) > ERROR_LINE_CHARS else "")


def _command_told(target: str | None, limit: int = 120, root: str | None = None) -> str:
    """A command as a memory tells it: as ``_command_shown``, without a ``cd <the project> &&`` later in it
    either (where it ran is the project), and with a git message (``-m "…"``) left out — it says what that one
    commit was, never what the lesson is, and at a hundred characters it pushed the fix out of the bite."""
    shown = _command_shown(target, 10_000)
    if root:
        for folder in (root, f'"{root}"', f"'{root}'"):
            shown = shown.replace(f"&& cd {folder} && ", "&& ").replace(f"; cd {folder} && ", "; ")
    if shown.startswith("git ") or " git " in shown:
        shown = _GIT_MESSAGE.sub(r'\1\2"…"', shown)
    return shown[:limit] + ("…" if len(shown) > limit else "")


def _without_leaders(line: str) -> str:
    """A line without its alignment runs: "=== 1 failed in 0.5s ===" → "1 failed in 0.5s", "x.....Failed" →
    "x ... Failed"."""
    return _LEADER.sub(" ... ", _EDGE_LEADER.sub("", line))


def _command_shown(target: str | None, limit: int = 120) -> str:
    """A command as a memory shows it: its first line, without a leading ``cd <folder> &&`` (where it ran is
    the project, not the lesson), cut."""
    first = (target or "").strip().splitlines()[0] if (target or "").strip() else ""
    while first.startswith("cd ") and "&&" in first:
        first = first.split("&&", 1)[1].strip()
    cut = len(first) > limit or "\n" in (target or "").strip()
    return first[:limit] + ("…" if cut else "")


def _key_of(call: StoredToolCall) -> str | None:
    return call_key(call.tool, call.target, call.error or "")


def _same_call(a: StoredToolCall, b: StoredToolCall, key: str) -> bool:
    """Whether `b` is another go at what `a` ran: the same program (a shell command), or the same tool on the same
    target (a Read of the same file)."""
    other = _key_of(b)
    if other is None or not another_go(key, other):
        return False
    return a.tool == "Bash" or a.target == b.target


@dataclass(frozen=True)
class Failure:
    """One failed call of a round, by what it was and how it failed (``processor/hook_kit/failure_keys.py``)."""

    call: StoredToolCall
    key: str
    signature: list[str]
    error_line: str
    fail_key: str  # where failures of this kind are filed (``failure_keys.failure_key``)


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
        """What fixed it, in a line: the setup, then the changed (or same) command (`root`: the project's folder)."""
        command = f"`{_command_told(self.resolved_by.target, root=root)}`"
        steps = [f"`{_command_told(step, 80, root)}`" for step in self.setup[:3]]
        if self.edits and not steps and not self.changed_command:
            return "changing " + ", ".join(f"`{e}`" for e in self.edits[:3]) + f", then {command} ran clean"
        if steps:
            return ", then ".join(steps) + f", then {command}" + ("" if self.changed_command else " again")
        return command


def _words(command: str) -> list[str]:
    """A command's words as a fix is compared by: no separators, a path by its last part."""
    return [w.rstrip("/").rsplit("/", 1)[-1] for w in command.split() if w not in ("&&", "||", ";", "|", "cd")
            and not w.startswith(("'", '"'))]


def failures_of(calls: list[StoredToolCall]) -> list[Failure]:
    """The failures among these calls that failed at something: not a call the user declined or interrupted, not
    the editor's mechanics, not an error that is only the user's words, not one that says nothing."""
    found = []
    for call in calls:
        if not call.failed or not call.error or not_a_failure(call.tool, call.error) or users_words(call.error):
            continue
        key = _key_of(call)
        signature = failure_signature(call.error)
        if key and signature:
            found.append(Failure(call, key, signature, _error_line(call.error), failure_key(key, call.error)))
    return found


def _inspects(call: StoredToolCall) -> bool:
    """``--help``, ``--version``, ``help``: a call that reads about the program, never one that fixes it. A
    ``--version`` that is given a value (``release.py --version 1.2.0``) is an argument, not a question."""
    words = (call.target or "").split()
    for index, word in enumerate(words):
        if word in ("--help", "-h", "help"):
            return True
        if word in ("--version", "-V"):
            following = words[index + 1] if index + 1 < len(words) else ""
            if not following or following.startswith("-") or following in ("&&", "||", ";", "|"):
                return True
    return False


def _fix(failure: Failure, later: list[StoredToolCall], replies: list[StoredMessage]) -> Fix | None:
    """What got past `failure` later in its round, when the round ends with the same call running clean: the
    first go at it that ran clean, or that kept the failed command whole and added to it (a step first: it got
    past this failure, whatever failed next); retries that fail the same way, and calls that only read about the
    program (``--help``), are passed over. None when it was never fixed, or when nothing changed on the way (a
    flaky rerun of the same command passed: nothing to learn)."""
    tries = [i for i, c in enumerate(later) if _same_call(failure.call, c, failure.key) and not _inspects(c)]
    if not any(not later[i].failed for i in tries):
        return None  # never ran clean in the round
    core = _command_shown(failure.call.target, 10_000)
    resolved = None
    for i in tries:
        call = later[i]
        if not call.failed:
            resolved = i
            break
        if call.error and same_failure(failure_signature(call.error), failure.signature):
            continue  # a retry: the same failure again
        if core and core in (call.target or "") and core != _command_shown(call.target, 10_000):
            resolved = i  # the command whole, with a step added: it got past this failure
            break
    if resolved is None:
        return None
    by, between = later[resolved], later[:resolved]
    setup = [c.target for c in between if c.tool == "Bash" and not c.failed and c.target and not _inspects(c)
             and any(k.startswith("cmd:") for k in command_keys(c.target))]
    edits = list(dict.fromkeys(c.target for c in between if c.tool in _EDITS and c.target and not c.failed))
    changed = " ".join((by.target or "").split()) != " ".join((failure.call.target or "").split())
    if not (setup or edits or changed):
        return None
    failed_at = failure.call.result_ts_ms or failure.call.ts_ms or 0
    said = [m for m in replies if failed_at < (m.ts_ms or 0) <= (by.ts_ms or 0)]
    return Fix(failure, by, setup, edits, changed, _diagnosis(said))


def _broad_stage(command: str) -> str | None:
    """``git add -A`` / ``git add .`` / ``git add --all`` / ``git commit -a``: staging everything, as typed."""
    for segment in command.replace("&&", "\n").replace(";", "\n").splitlines():
        words = segment.split()
        if len(words) >= 3 and words[0] == "git" and words[1] == "add" and any(w in ("-A", "--all", ".", "-u")
                                                                                for w in words[2:]):
            return " ".join(words[:3])
        if len(words) >= 3 and words[0] == "git" and words[1] == "commit" and any(
                w.startswith("-") and not w.startswith("--") and "a" in w for w in words[2:]):
            return "git commit -a"
    return None


def _unstaged(command: str) -> list[str]:
    """The paths a ``git reset <paths>`` or ``git restore --staged <paths>`` took out of the index."""
    for segment in command.replace("&&", "\n").replace(";", "\n").splitlines():
        words = segment.split()
        if words[:2] == ["git", "reset"] and not any(w.startswith(("--hard", "--soft", "--mixed", "HEAD"))
                                                     for w in words[2:]):
            return [w for w in words[2:] if not w.startswith("-") and w != "."]
        if words[:2] == ["git", "restore"] and "--staged" in words:
            return [w for w in words[2:] if not w.startswith("-") and w != "."]
    return []


def undone_staging(calls: list[StoredToolCall], project: str | None) -> list[Lesson]:
    """Staging everything that the session then had to partly undo: ``git add -A`` swept in files (a user's own
    notes, build output, ``.DS_Store``) that the next calls took out of the index again. What was swept in,
    and how it was undone, is told before the next ``git add -A`` of the project: stage files by name."""
    found: list[Lesson] = []
    for index, call in enumerate(calls):
        staged = _broad_stage(call.target or "") if call.tool == "Bash" and not call.failed else None
        if staged is None:
            continue
        for later in calls[index + 1:index + 8]:
            paths = _unstaged(later.target or "") if later.tool == "Bash" and not later.failed else []
            if not paths:
                continue
            shown = ", ".join(f"`{p}`" for p in paths[:3])
            text = (f"`{staged}` here also staged {shown}, which had to be taken out again "
                    f"(`{_command_told(later.target, 80, project)}`): stage the changed files by name.")
            seed = f"undone:{project}:{staged.split()[1]}:{' '.join(sorted(paths))}"
            found.append(Lesson(id="ep_" + hashlib.sha1(seed.encode()).hexdigest()[:16], kind="gotcha",
                                text=redact(text), full_content=redact(text),
                                entities=[redact(f"$ {staged}"), *(redact(p) for p in paths[:3])],
                                source_uuids=[call.use_uuid, later.use_uuid], created_at=later.ts_ms))
            break
    return found


MIN_RECIPE_STEPS = 2
RECIPE_CHARS = 600


def recipe_of(failures: list[Failure], in_round: list[StoredToolCall], replies: list[StoredMessage],
              project: str | None) -> Lesson | None:
    """A recipe assembled through a chain of failures: the same call failed in two or more different ways, each
    time something changed, until it ran clean. The steps, in the order they were found (the session's diagnosis
    when it said one), become one memory: "To run `pytest` here: …; …; then `…` ran clean." — told before that
    call runs again, where the next session would otherwise assemble it from scratch."""
    for failure in failures:
        chain = [f for f in failures if f.fail_key == failure.fail_key and another_go(failure.key, f.key)
                 and (f.call.ts_ms or 0) >= (failure.call.ts_ms or 0)]
        distinct: list[Failure] = []
        for f in chain:
            if not any(same_failure(f.signature, d.signature) for d in distinct):
                distinct.append(f)
        if len(distinct) < MIN_RECIPE_STEPS:
            continue
        last = distinct[-1]
        later = in_round[in_round.index(last.call) + 1:]
        clean = next((c for c in later if _same_call(last.call, c, last.key) and not c.failed and not _inspects(c)),
                     None)
        if clean is None:
            return None  # never ran clean: a recipe for nothing
        steps = []
        for index, f in enumerate(distinct):
            until = distinct[index + 1].call if index + 1 < len(distinct) else clean
            step = _recipe_step(f, until, in_round, replies, project)
            if step is not None:
                steps.append(step)
        if len(steps) < MIN_RECIPE_STEPS:
            continue  # the code changed between the goes, not the way of running it: that is the work itself
        command = _command_told(clean.target, 120, project)
        program = (failure.key[4:] if failure.key.startswith("cmd:") else failure.key).split()
        text = fit(f"To run `{' '.join(program[:3])}` here: " + "; ".join(steps) + f"; then `{command}` ran clean.",
                   RECIPE_CHARS)
        seed = f"recipe:{project}:{failure.fail_key}:{'|'.join(d.signature[0] for d in distinct)}"
        return Lesson(id="ep_" + hashlib.sha1(seed.encode()).hexdigest()[:16], kind="convention", text=redact(text),
                      full_content=redact(text), entities=[redact(f"$ {command}")],
                      source_uuids=list(dict.fromkeys(u for d in distinct for u in (d.call.use_uuid,
                                                                                    d.call.result_uuid) if u)),
                      created_at=clean.ts_ms, miner="recipe")
    return None


def _recipe_step(failure: Failure, until: StoredToolCall, in_round: list[StoredToolCall],
                 replies: list[StoredMessage], project: str | None) -> str | None:
    """What got past one failure of a recipe's chain, when it was a way of working: a step run first, the
    command run another way, or a tool's constraint the session said. None when only the code changed in
    between (a type error fixed, a test made to pass: the work, not how to run it here), or when the session
    put it down to the code's own cause."""
    between = in_round[in_round.index(failure.call) + 1:in_round.index(until)]
    setup = [c for c in between if c.tool == "Bash" and not c.failed and c.target and not _inspects(c)
             and any(k.startswith("cmd:") for k in command_keys(c.target))]
    changed = _shape(until.target) != _shape(failure.call.target)
    said = [m for m in replies if (failure.call.result_ts_ms or failure.call.ts_ms or 0) < (m.ts_ms or 0)
            <= (until.ts_ms or 0)]
    diagnosis = _diagnosis(said)
    if diagnosis is not None and diagnosis[0] != "gotcha":
        return None  # the session put it down to the code's own cause: fixing that was the work
    if not (setup or changed or diagnosis is not None):
        return None
    if diagnosis is not None:
        return diagnosis[1].rstrip(".")
    return f"after “{fit(failure.error_line, 90)}”, `{_command_told(until.target, 90, project)}`"


_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")


def _shape(command: str | None) -> str:
    """A command without what its quotes hold: another commit message or search text is not another way of
    running it."""
    return " ".join(_QUOTED.sub('""', command or "").split())


def mine_round(round_messages: list[StoredMessage], calls: list[StoredToolCall],
               next_round_ms: int | None = None, project: str | None = None) -> tuple[list[Lesson], list[Failure]]:
    """The lessons of one round (its messages, and the session's tool calls made during it), and every failure
    it holds, fixed or not (the project counts how often each way of failing recurs)."""
    if not round_messages or not calls:
        return [], []
    start = next((m.ts_ms for m in round_messages if m.ts_ms is not None), None)
    if start is None:
        return [], []
    in_round = [c for c in calls if c.ts_ms is not None and c.ts_ms >= start
                and (next_round_ms is None or c.ts_ms < next_round_ms)]
    replies = [m for m in round_messages if m.role == "assistant" and m.ts_ms is not None]
    failures = failures_of(in_round)
    recipe = recipe_of(failures, in_round, replies, project)
    lessons: list[Lesson] = undone_staging(in_round, project)[:1] + ([recipe] if recipe else [])
    seen: set[str] = {lesson.id for lesson in lessons}
    for failure in failures:
        later = in_round[in_round.index(failure.call) + 1:]
        fix = _fix(failure, later, replies)
        if fix is None:
            continue
        lesson = _lesson(fix, project)
        if lesson is None or lesson.id in seen or lesson.text in seen:
            continue
        seen.update((lesson.id, lesson.text))
        lessons.append(lesson)
        if len(lessons) >= MAX_LESSONS_PER_ROUND:
            break
    return lessons, failures


def _lesson(fix: Fix, project: str | None) -> Lesson | None:
    """The memory a fix makes. A changed command or a setup step is a way of working here (``gotcha``: told when
    the failure comes back, and before the call once it recurs). A fix by editing files is the work itself: a
    lesson only when the session said why, and a ``gotcha`` only when that names a tool's constraint (SQLite
    does not support …); the project's own code missing something is work in progress (``bugfix``)."""
    failure, diagnosis = fix.failure, fix.diagnosis
    if not (fix.setup or fix.changed_command):
        if diagnosis is None:
            return None
        kind = "gotcha" if diagnosis[0] == "gotcha" and _TOOLS.search(diagnosis[1]) else "bugfix"
    else:
        kind = "gotcha"
    command = _command_told(failure.call.target, root=project) or failure.call.tool
    how = fix.how(project)
    if diagnosis is not None:
        summary = diagnosis[1]
    else:
        summary = fit(f"`{command}` failed: {failure.error_line} What fixed it: {how}.", LESSON_CHARS)
    lines = [summary, f"Failed: `{command}`" + (f" — {failure.error_line}" if failure.error_line else "")]
    if fix.edits and fix.changed_command is False and not fix.setup:
        lines.append("Fixed by " + how + ".")
    else:
        then = _command_told(fix.resolved_by.target, root=project)
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
    # (or a rebuild) finds it, and one the user marked wrong is never made again. Work fixed by edits is
    # one memory per failure.
    seed = (f"fix:{project}:{failure.fail_key}:{failure.signature[0]}" if kind == "gotcha"
            else f"lesson:{failure.call.tool_use_id}")
    return Lesson(id="ep_" + hashlib.sha1(seed.encode()).hexdigest()[:16], kind=kind, text=redact(summary),
                  full_content=redact("\n".join(lines)), entities=[redact(e) for e in entities],
                  source_uuids=list(dict.fromkeys(sources)),
                  created_at=(said.ts_ms if said else None) or failure.call.ts_ms, key=failure.fail_key,
                  signature=tuple(failure.signature), fix=redact(fit(how, FIX_CHARS)),
                  session_fixed=bool(fix.setup or fix.changed_command), uses=fix.added)
