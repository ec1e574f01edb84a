"""Whether a memory's text states something another session could act on.

A bite shown unasked must be a statement: a lesson, a rule, a decision, a fact. Not:
- narration of work in progress ("Now let me run the tests", "I'll fix both issues", "All 27 tests pass");
- a list of tool calls (``[tool: Grep …] [tool: Read …]``) or little else;
- a cut-off fragment (it starts with an ellipsis, or is excerpts joined by one);
- a question.
English cues only: other text is judged by its shape alone (tool notes, fragments).
"""

from __future__ import annotations

import re

_TOOL_NOTE = re.compile(r"\[tool: [^\]\n]*\]")
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
# Narration: what the assistant is doing or about to do, or that a step went fine.
_NARRATION = re.compile(
    r"^(?:(?:now|ok(?:ay)?|great|perfect|excellent|good|alright|first|next|then|finally|done|sure)[,!.]?\s+)*"
    r"(?:let me|let's|i'll|i will|i'm going to|i am going to|i've|i have|i need to|i can see|i see|"
    r"we need to (?:check|look|see|run)|running|checking|looking at|now (?:i|we|let)|here's what|"
    r"all (?:\d+ )?(?:the )?(?:tests?|checks?) (?:pass|passed|are passing)|(?:the )?tests? (?:pass|passed)|"
    r"everything (?:works|is working|passes)|(?:that|this) (?:worked|works|fixed it)|you're (?:absolutely )?right)\b",
    re.IGNORECASE)
_MIN_WORDS = 5


def prose(text: str) -> str:
    """The text without its tool notes, whitespace collapsed."""
    return " ".join(_TOOL_NOTE.sub(" ", text).split())


def word_count(text: str) -> int:
    """Its words: runs of letters (numbers, ids and punctuation are not words)."""
    return len(_WORD.findall(text))


def is_tool_list(text: str) -> bool:
    """Mostly tool notes: fewer than five words of its own."""
    return bool(_TOOL_NOTE.search(text)) and word_count(prose(text)) < _MIN_WORDS


def is_narration(text: str) -> bool:
    return bool(_NARRATION.match(prose(text).lstrip("-*•> ")))


_INLINE_CODE = re.compile(r"`[^`\n]+`")


def is_fragment(text: str) -> bool:
    """Cut off: it starts with an ellipsis or a comma, or is excerpts joined by one (outside inline code)."""
    body = prose(text)
    return not body or body[0] in "…,;" or body.startswith("...") or " … " in _INLINE_CODE.sub("`code`", body)


def states_something(text: str) -> bool:
    """A statement another session can act on: none of the shapes above, and at least five words."""
    body = prose(text)
    return (word_count(body) >= _MIN_WORDS and not body.endswith("?") and not is_tool_list(text)
            and not is_narration(body) and not is_fragment(body))
