"""Lessons a session taught, found without an LLM: a failure, the diagnosis after it, the change that fixed it.

Sessions teach in a recognisable shape. A shell command fails (its tool result is marked ``is_error``); the
assistant says why ("the issue is that …", "`dist/` is git-ignored, so …", "SQLite doesn't support …");
it changes something; the same command then runs clean. That diagnosis, stated in the session's own words,
becomes a memory of its own, with the command, the files changed and the error as its entities, so the
next session that is about to run that command or touch that file is told before it fails the same way
(``processor/recall/lesson_index.py``), and ``memory_recall`` finds it by the error's words.

Kinds:
- ``gotcha``: the diagnosis names a constraint of a tool, a platform or the repository (doesn't support,
  rejects, is ignored, requires, only works with, must be …): it bites again whenever that command runs;
- ``bugfix``: the cause of a failure of the code itself (the issue is that …, fails because …): recalled
  when asked about, never pushed at a later session by itself (the code has moved on).

No lesson is made from:
- a failure that was never fixed: the same command (by its ``cmd:`` key) must run clean later in the round,
  and the diagnosis must come between the last failure and that clean run;
- tool mechanics: an edit whose old text was not found, a file not read first, a call the user declined (its
  "error" is then the user's own words), a permission prompt — only shell commands teach;
- narration ("Let me …", "Now I'll …"), a question, or a sentence too thin to stand alone (fewer than six
  words, or nothing it is about: no code span, path, identifier, command or named tool).
English cues only: text in another language yields no lesson, never a wrong one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from processor.memory.sentences import units
from processor.memory.statements import is_narration, prose, word_count
from processor.redaction import redact
from processor.store.episodes import StoredMessage
from processor.store.tool_calls import StoredToolCall
from recall_hook.tool_keys import command_keys

LESSON_CHARS = 300  # the diagnosis sentence, at most
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
# Tool mechanics and refusals: the command never ran, so nothing about it was learned.
_NOT_RUN = re.compile(r"doesn't want to (?:proceed|take this action)|requires approval|permission to use|"
                      r"was rejected|was blocked|haven't granted|not allowed to run|user denied", re.IGNORECASE)
# An error that is only the user's words: a call the user declined, with what to do instead ("Wait, we need
# to copy X too"). One line of prose with no sign of a program's complaint in it.
_PROGRAM_OUTPUT = re.compile(r"\b(?:error|exception|traceback|failed|failure|fatal|warning|denied|not found|"
                             r"no such|exit code|exited|command not found|usage:|errno|panic)\b|[:=]\s*\d|[{}<>|]",
                             re.IGNORECASE)
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


def users_words(error: str | None) -> bool:
    """The 'error' is the user's reply to a declined call, not a program's output."""
    text = (error or "").strip()
    return bool(text) and "\n" not in text and len(text) < 400 and not _PROGRAM_OUTPUT.search(text)


def _command_keys(call: StoredToolCall) -> set[str]:
    return {k for k in command_keys(call.target or "") if k.startswith("cmd:")}


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
    lines = [" ".join(line.split()) for line in (error or "").splitlines() if line.strip()]
    lines = [line for line in lines if not line.lower().startswith(("exit code", "warn"))] or lines
    chosen = next((line for line in lines if _ERROR_LINE.search(line)), lines[0] if lines else "")
    return chosen[:ERROR_LINE_CHARS] + ("…" if len(chosen) > ERROR_LINE_CHARS else "")


def _command_shown(target: str | None) -> str:
    first = (target or "").strip().splitlines()[0] if (target or "").strip() else ""
    return first[:120] + ("…" if len(first) > 120 or "\n" in (target or "").strip() else "")


def mine_round(round_messages: list[StoredMessage], calls: list[StoredToolCall],
               next_round_ms: int | None = None) -> list[Lesson]:
    """The lessons of one round: its messages, and the session's tool calls made during it."""
    if not round_messages or not calls:
        return []
    start = next((m.ts_ms for m in round_messages if m.ts_ms is not None), None)
    if start is None:
        return []
    in_round = [c for c in calls if c.ts_ms is not None and c.ts_ms >= start
                and (next_round_ms is None or c.ts_ms < next_round_ms)]
    replies = [m for m in round_messages if m.role == "assistant" and m.ts_ms is not None]
    lessons: list[Lesson] = []
    seen: set[str] = set()
    for index, call in enumerate(in_round):
        if not call.failed or call.tool != "Bash" or _NOT_RUN.search(call.error or "") or users_words(call.error):
            continue
        keys = _command_keys(call)
        if not keys:
            continue
        later = in_round[index + 1:]
        success = next((c for c in later if c.tool == "Bash" and not c.failed and keys & _command_keys(c)), None)
        if success is None:
            continue  # never fixed in this round: no lesson
        if any(c.failed and keys & _command_keys(c) for c in later if (c.ts_ms or 0) < (success.ts_ms or 0)):
            continue  # a later failure of the same command comes before the clean run: that one teaches
        failed_at = call.result_ts_ms or call.ts_ms or 0
        between = [m for m in replies if failed_at < (m.ts_ms or 0) <= (success.ts_ms or 0)]
        found = _diagnosis(between)
        if found is None:
            continue
        kind, sentence, said = found
        if sentence in seen:
            continue
        seen.add(sentence)
        changed = [c.target for c in later
                   if c.tool in ("Edit", "MultiEdit", "Write", "NotebookEdit") and c.target
                   and failed_at < (c.ts_ms or 0) <= (success.ts_ms or 0)]
        lessons.append(_lesson(kind, sentence, call, success, said, list(dict.fromkeys(changed))))
        if len(lessons) >= MAX_LESSONS_PER_ROUND:
            break
    return lessons


def _lesson(kind: str, sentence: str, failed: StoredToolCall, success: StoredToolCall, said: StoredMessage,
            changed: list[str]) -> Lesson:
    command = _command_shown(failed.target)
    error = _error_line(failed.error)
    lines = [sentence, f"Failed: `{command}`" + (f" — {error}" if error else "")]
    if changed:
        lines.append("Fixed by changing " + ", ".join(f"`{path}`" for path in changed[:5])
                     + f", then `{_command_shown(success.target)}` ran clean.")
    else:
        lines.append(f"Then `{_command_shown(success.target)}` ran clean.")
    entities = [f"$ {command}", *changed[:5]]
    if error:
        entities.append(error[:80])
    sources = [u for u in (failed.use_uuid, failed.result_uuid, said.uuid, success.use_uuid) if u]
    digest = hashlib.sha1(f"lesson:{failed.tool_use_id}".encode()).hexdigest()[:16]
    return Lesson(id=f"ep_{digest}", kind=kind, text=redact(sentence), full_content=redact("\n".join(lines)),
                  entities=[redact(e) for e in entities], source_uuids=list(dict.fromkeys(sources)),
                  created_at=said.ts_ms or failed.ts_ms)
