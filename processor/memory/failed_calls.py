"""The failures of a round: which failed calls failed at something, and how each is known.

A call that failed is a failure to learn from unless the user declined or interrupted it (its "error" is then the
user's choice or words), it is the editor's own mechanics (an edit whose text was not found), or its error says
nothing but "Error". Each failure is known by its call's key and its error's signature
(``processor/hook_kit/failure_keys.py``: its program, its error lines with paths, numbers and names masked), so the same
failure in a later session is found again. Lessons (``processor/memory/lessons.py``) and recipes
(``processor/memory/recipes.py``) are made from them, and the episodizer counts every one, fixed or not, where it
recurs (``processor/store/failures.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processor.capture.captured import RAN_NOTHING_LINES
from processor.hook_kit.failure_keys import (
    another_go,
    call_key,
    call_signature,
    exception_line,
    failure_key,
    not_a_failure,
    program_of,
)
from processor.hook_kit.failure_keys import signature as failure_signature
from processor.hook_kit.tool_keys import SCOPE_OPTIONS
from processor.store.tool_calls import StoredToolCall

ERROR_LINE_CHARS = 160

# An error that is only the user's words: a call the user declined, with what to do instead ("Wait, we need
# to copy X too"). One line of prose with no sign of a program's complaint in it.
_PROGRAM_OUTPUT = re.compile(r"^[\w.-]+: |\*\*\*|\b(?:error|exception|traceback|failed|failure|fatal|warning|denied|"
                             r"not found|no such|exit code|exited|command not found|usage:|errno|panic)\b|[:=]\s*\d"
                             r"|[{}<>|]",
                             re.IGNORECASE)
# A run of one punctuation mark drawn to align a status column ("trim trailing whitespace........Failed", pre-commit's
# and test runners' way): as long as the words it joins, it would push what fixed it out of the bite.
_LEADER = re.compile(r"\s*([.\-=_*#~])\1{3,}\s*")
_EDGE_LEADER = re.compile(r"^\s*([.\-=_*#~])\1{3,}\s*|\s*([.\-=_*#~])\2{3,}\s*$")
_ERROR_LINE = re.compile(r"\b(?:error|exception|failed|failure|fatal|denied|not found|no such|cannot|can't|"
                         r"refused|invalid|unknown|unexpected|syntax|no tests?(?: files)? found|collected 0 items|"
                         r"ran 0 tests|no projects matched)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Failure:
    """One failed call of a round, by what it was and how it failed (``processor/hook_kit/failure_keys.py``)."""

    call: StoredToolCall
    key: str
    signature: list[str]
    error_line: str
    fail_key: str  # where failures of this kind are filed (``failure_keys.failure_key``)


def users_words(error: str | None) -> bool:
    """The 'error' is the user's reply to a declined call, not a program's output."""
    text = (error or "").strip()
    return bool(text) and "\n" not in text and len(text) < 400 and not _PROGRAM_OUTPUT.search(text)


def _without_leaders(line: str) -> str:
    """A line without its alignment runs: "=== 1 failed in 0.5s ===" → "1 failed in 0.5s", "x.....Failed" →
    "x ... Failed"."""
    return _LEADER.sub(" ... ", _EDGE_LEADER.sub("", line))


def _error_line(error: str | None) -> str:
    """The line of an error output that says what went wrong (a Python traceback's exception line, else the first
    that names an error), cut."""
    text = (error or "").strip()
    if text[:6].lower() == "error:":
        text = text[6:].lstrip()  # Claude Code's wrapper, not the tool's words
    raised = exception_line(error or "")
    lines = [line for line in (_without_leaders(" ".join(raw.split())) for raw in text.splitlines()) if line]
    lines = [line for line in lines if not line.lower().startswith(("exit code", "warn"))] or lines
    chosen = " ".join(raised.split()) if raised else next((line for line in lines if _ERROR_LINE.search(line)),
                                                          lines[0] if lines else "")
    return chosen[:ERROR_LINE_CHARS] + ("…" if len(chosen) > ERROR_LINE_CHARS else "")


def key_of(call: StoredToolCall) -> str | None:
    return call_key(call.tool, call.target, call.error or "")


def same_call(a: StoredToolCall, b: StoredToolCall, key: str) -> bool:
    """Whether `b` is another go at what `a` ran: the same program (a shell command), or the same tool on the same
    target (a Read of the same file)."""
    other = key_of(b)
    if other is None:
        return False
    if another_go(key, other):
        return a.tool == "Bash" or a.target == b.target
    # A script whose test run ran nothing says what it ran (`> jest --passWithNoTests …`): running that tool
    # another way (`pnpm --filter api exec jest …`) is another go at it.
    return a.tool == b.tool == "Bash" and ran_nothing(failure_signature(a.error or "")) and \
        program_of(other) in {word.strip("'\"`") for word in (a.error or "")[:1000].split()}


def inspects(call: StoredToolCall) -> bool:
    """``--help``, ``--version``, ``help``: a call that reads about the program, never one that fixes it. A
    ``--version`` that is given a value (``release.py --version 1.2.0``) is an argument, not a question, and so is
    a ``-h`` given one (``psql -h localhost``: the host)."""
    words = (call.target or "").split()
    for index, word in enumerate(words):
        if word in ("--help", "help"):
            return True
        if word in ("--version", "-V", "-h"):
            following = words[index + 1] if index + 1 < len(words) else ""
            if not following or following.startswith("-") or following in ("&&", "||", ";", "|"):
                return True
    return False


def failures_of(calls: list[StoredToolCall]) -> list[Failure]:
    """The failures among these calls that failed at something: not a call the user declined or interrupted, not
    the editor's mechanics, not an error that is only the user's words, not one that says nothing."""
    found = []
    for call in calls:
        if not call.failed or not call.error or not_a_failure(call.tool, call.error) or users_words(call.error):
            continue
        key = key_of(call)
        signature = call_signature(call.tool, call.target, call.error)
        if key and signature:
            found.append(Failure(call, key, signature, _error_line(call.error), failure_key(key, call.error)))
    return found


# git's subcommands that stage, unstage or look: steps that only prepare running the same command again.
_STAGING = frozenset({"add", "stage", "status", "diff", "log", "show", "restore", "reset", "rm"})


def stages_only(command: str) -> bool:
    """Whether a command line only stages or looks at git state (``git add x && git status``)."""
    segments = [seg.strip() for seg in re.split(r"&&|;|\|\|", command) if seg.strip()]
    for segment in segments:
        words = segment.split()
        if not words or words[0] != "git":  # a `cd` moves the shell: that is a change, not staging
            return False
        sub = next((w for w in words[1:] if not w.startswith("-") and "/" not in w), "")
        if sub not in _STAGING:
            return False
    return bool(segments)


# A failure of the moment: a lock file another git left behind, a path typed wrong, the network, a busy port. When
# it comes back, what fixed it is told right after it; told before every call of the command, it is noise. Read in
# the error's words or in its signature (``failure_keys``: paths masked, punctuation dropped).
_OF_THE_MOMENT = re.compile(r"\.lock\b|\block(?:ed)? by\b|unable to create .*:? file exists|pathspec|did not match any|"
                            r"no such file or directory|file or directory not found|could not resolve|"
                            r"connection (?:refused|reset|timed out)|"
                            r"econn(?:refused|reset)|timed? ?out|temporar|rate limit|too many requests|"
                            r"address already in use|eaddrinuse|\b50[234]\b|network", re.IGNORECASE)


# A test run that ran nothing (``processor/capture/captured.py`` ``ran_nothing``), as its signature says it.
_RAN_NOTHING_LINES = tuple(line for words in RAN_NOTHING_LINES for line in failure_signature(words))


def ran_nothing(signature: list[str] | tuple[str, ...]) -> bool:
    """Whether a failure is a test run that found nothing to run: how it was asked (its options), not its program."""
    return bool(signature) and all(line.startswith(_RAN_NOTHING_LINES) for line in signature)


def asked_with(command: str) -> list[str]:
    """The options a command passed (``--testPathPattern`` of ``pnpm --filter api test -- --testPathPattern=x``),
    without where it ran (``--filter``), the end of options (``--``) or a count (``tail -60``)."""
    options: list[str] = []
    for word in command.split():
        name = word.partition("=")[0].strip("'\"")
        if name.startswith("-") and name.lstrip("-")[:1].isalpha() and name not in SCOPE_OPTIONS \
                and name not in options:
            options.append(name)
    return options[:5]


def of_the_moment(signature: list[str] | tuple[str, ...]) -> bool:
    """Whether a failure (its signature's lines) depends on the moment rather than on how things are run here."""
    return any(_OF_THE_MOMENT.search(line) for line in signature)
