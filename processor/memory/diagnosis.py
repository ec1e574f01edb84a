"""The diagnosis a session said between a failure and its fix: one sentence that states a constraint or a cause.

A lesson (``processor/memory/lessons.py``) and a recipe's step (``processor/memory/recipes.py``) take the session's
own words when it said why ("the issue is that …", "`dist/` is git-ignored, so …"). A sentence is a diagnosis when
it can stand alone: not narration ("Let me …") nor a question, long enough, about something specific (a code span,
a path, an identifier, a named tool), and stating either
- a constraint of a tool, platform or repository (``gotcha``: it will fail the same way again; not one said as a
  guess: "`ty` seems to have issues with it"), or
- the cause of a failure (``bugfix``: the project's own code was at fault).
English cues only: an error in another language still has its signature and its fix.
"""

from __future__ import annotations

import re

from processor.memory.sentences import units
from processor.memory.statements import is_narration, prose, word_count
from processor.store.episodes import StoredMessage

LESSON_CHARS = 300  # the diagnosis sentence, at most
MIN_WORDS = 6

# A constraint of a tool, platform or repository: it will fail the same way again.
_CONSTRAINT = re.compile(
    r"\b(?:doesn't|does not|don't|do not|can't|cannot|can not|won't|will not|isn't|is not|aren't|are not)\s+"
    r"(?:\w+\s+)?(?:support|allow|accept|handle|recogni[sz]e|understand|work with|work on|work in|run|resolve|"
    r"find|available|installed|exist|serve|permit|like|use)\w*\b"
    r"|\bnot (?:supported|allowed|available|installed|permitted|recogni[sz]ed)\b"
    r"|\b(?:rejects?|refuses?)\b|\b(?:git-?)?ignored\b|\.gitignore\b|\bgitignore[sd]?\b"
    r"|\bonly (?:works?|supports?|accepts?|runs?)\b|\brequires?\b|\bmust (?:be|have|use|run)\b"
    r"|\bneeds? to be (?:run|installed|built|set|added|enabled|configured|committed|forced?)\b"
    r"|\blimitation\b|\bincompatible\b|\bdeprecated in\b|\bno longer (?:supports?|works?|accepts?)\b"
    r"|\b(?:has|have|having)\s+(?:an?\s+|some\s+)?(?:issues?|problems?|troubles?|bugs?)\s+with\b|\bfalse positives?\b"
    r"|\b(?:expects?|wants?) (?:a|an|the)\b", re.IGNORECASE)
# A constraint said as a guess.
_HEDGE = re.compile(r"\b(?:seems?|appears?|might|may|maybe|perhaps|probably|possibly|i think|i believe|not sure|"
                    r"apparently|presumably|i guess)\b", re.IGNORECASE)
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
# "Let me add a type ignore since `pytest.skip()` is a valid call but ty has issues with it": the action is
# narration, the reason after "since"/"because" is the diagnosis.
_REASON = re.compile(r"\b(?:since|because|as)\s+(?=\S)", re.IGNORECASE)


def _clean(sentence: str) -> str:
    return _FLUFF.sub("", prose(sentence)).strip()


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
        # "`ty` seems to have issues with it": a guess at a constraint is not one (a cause may be said as one:
        # "the issue seems to be …", and is checked by the fix that follows).
        return None if _HEDGE.search(sentence) else "gotcha"
    if _CAUSE.search(sentence):
        return "bugfix"
    return None


def names_a_tool(sentence: str) -> bool:
    """The sentence names a tool or platform (git, npm, SQLite …): a constraint it states is the tool's."""
    return bool(_TOOLS.search(sentence))


def diagnosis_in(messages: list[StoredMessage]) -> tuple[str, str, StoredMessage] | None:
    """The best diagnosis among these assistant messages, as (kind, sentence, message): a constraint over a cause,
    the later one first (after several tries, the last diagnosis is the one that held)."""
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
