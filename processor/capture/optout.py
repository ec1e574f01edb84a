"""Which prompt opts its session out of memory: the markers a user types, and the environment variable.

Two levels, the stronger one wins and a session's level only ever grows:

- ``[engram off]`` (also ``[engram:off]``): this session gets no SessionStart digest and no memory
  bites from here on; it is still captured, so later sessions may remember it;
- ``[engram off the record]`` (also ``[engram:off-the-record]``): that, and the session's captured
  messages and the episodes made from them are dropped, and it is never captured again.

A marker counts only in the user's own words: inside a fenced or inline code block, a ``>`` quoted
line or a "double-quoted" span it is text quoted from elsewhere (a README, a log, this docstring) and
is ignored. Starting Claude Code with ``ENGRAM_OFF=1`` (or ``memory``) / ``ENGRAM_OFF=record`` does
the same for every session of that Claude Code process: the hooks read the variable themselves, and the
SessionStart hook leaves an off-the-record request for the processor (``<session>.off`` next to the
recollection files, ``processor/hook_kit/hook_io.py``).
"""

from __future__ import annotations

import re

from processor.hook_kit import hook_io

MEMORY = "memory"
RECORD = "record"
LEVELS: tuple[str | None, ...] = (None, MEMORY, RECORD)  # weakest first (processor/store/sessions.py)
OFF_SUFFIX = hook_io.OFF_SUFFIX  # the hooks check for the same marker

_MARKER = re.compile(r"\[\s*engram\s*[:\s]\s*off(?P<record>[\s_-]+the[\s_-]+record)?\s*\]", re.IGNORECASE)
_FENCED = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)[^`].*?\1", re.DOTALL)
_QUOTED_LINE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_DOUBLE_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”|«[^»\n]*»")


def own_words(text: str) -> str:
    """The prompt without what it quotes: code blocks, inline code, > lines and double-quoted spans."""
    for pattern in (_FENCED, _INLINE_CODE, _QUOTED_LINE, _DOUBLE_QUOTED):
        text = pattern.sub(" ", text)
    return text


def marker_level(text: str) -> str | None:
    """The opt-out a user prompt asks for: 'record', 'memory' or None."""
    if "engram" not in text.lower():
        return None  # the common case, without the regular expressions
    level = None
    for found in _MARKER.finditer(own_words(text)):
        level = stronger(level, RECORD if found.group("record") else MEMORY)
    return level


def stronger(a: str | None, b: str | None) -> str | None:
    return a if LEVELS.index(a) >= LEVELS.index(b) else b


# ENGRAM_OFF's meaning: unset/empty/0/false/no → None; 'record' → off the record; anything else → memory (the
# hooks read it too, so the rule is the kit's).
env_level = hook_io.opt_out_level
