"""Where a text's sentences, list items and code blocks begin and end: the units nothing may cut inside.

Episode pieces are packed from these units and query-focused bites are chosen among them, so a piece
never starts or ends mid-sentence and a bite is always whole sentences (or a window of one very long
sentence). Pure functions over any text: megabyte pastes, blobs with no spaces and scripts without
Latin punctuation all come out as bounded units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processor.memory.pasted import is_note

# A fenced code block opens with ``` or ~~~ at a line start (indent allowed) and closes with the same fence.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+")
# The end of a sentence: Latin-script punctuation followed by space, or CJK punctuation (no space
# follows it in those scripts). Abbreviations like "e.g." may split early; the unit is still whole text.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+(?=\S)|(?<=[。！？])\s*(?=\S)")
_TOOL_NOTE_LINE = re.compile(r"^(?:\[tool: [^\]\n]*\]\s*)+$")


@dataclass(frozen=True)
class Unit:
    """One uncuttable span of text: a sentence, a list item, a code block or a tool note line."""

    text: str
    kind: str  # "sentence" | "item" | "code" | "tool" | "paste" (the note a paste leaves: memory.pasted)
    starts_line: bool = True  # False for a sentence that goes on the line of the one before it


def _hard_cuts(text: str, max_chars: int) -> list[str]:
    """A span longer than max_chars with no boundary of its own: cut at spaces, else anywhere (a blob)."""
    out: list[str] = []
    while len(text) > max_chars:
        space = text.rfind(" ", max_chars // 2, max_chars)
        cut = space if space > 0 else max_chars
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        out.append(text)
    return out


def _code_units(lines: list[str], max_chars: int) -> list[Unit]:
    """A code block, whole when it fits; a longer one in runs of whole lines, each re-fenced so that every
    piece holds a complete block."""
    block = "\n".join(lines)
    if len(block) <= max_chars:
        return [Unit(block, "code")]
    opener = lines[0].strip()
    fence = _FENCE.match(opener)
    closer = fence.group(1) if fence else "```"
    body = lines[1:-1] if len(lines) > 1 and _FENCE.match(lines[-1]) else lines[1:]
    room = max(max_chars - len(opener) - len(closer) - 2, 16)
    units: list[Unit] = []
    run: list[str] = []
    size = 0
    for line in body:
        for part in _hard_cuts(line, room) if len(line) > room else [line]:
            if run and size + len(part) + 1 > room:
                units.append(Unit("\n".join([opener, *run, closer]), "code"))
                run, size = [], 0
            run.append(part)
            size += len(part) + 1
    if run or not units:
        units.append(Unit("\n".join([opener, *run, closer]), "code"))
    return units


_INLINE_CODE = re.compile(r"`[^`\n]+`")


def _sentence_spans(text: str) -> list[str]:
    """The text split at sentence ends, never inside inline code (`ALTER TABLE … MODIFY` is one phrase)."""
    if "`" not in text:
        return _SENTENCE_END.split(text)
    code = [m.span() for m in _INLINE_CODE.finditer(text)]
    spans: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if any(a < end.start() < b for a, b in code):
            continue
        spans.append(text[start:end.start()])
        start = end.end()
    spans.append(text[start:])
    return spans


def split_sentences(text: str, max_chars: int) -> list[str]:
    """The sentences of one line or paragraph, each at most max_chars (a longer one is cut at spaces)."""
    out: list[str] = []
    for sentence in _sentence_spans(text.strip()):
        sentence = sentence.strip()
        if sentence:
            out += _hard_cuts(sentence, max_chars) if len(sentence) > max_chars else [sentence]
    return out


def units(text: str, max_chars: int) -> list[Unit]:
    """The text as a list of units of at most about max_chars each, in order, losing no words."""
    found: list[Unit] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(1)
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(marker[0] * len(marker)):
                end += 1
            block = lines[i:end + 1]  # an unclosed fence runs to the end of the text
            found += _code_units(block, max_chars)
            i = end + 1
            continue
        i += 1
        stripped = line.strip()
        if not stripped:
            continue
        if is_note(stripped):
            found += [Unit(part, "paste") for part in _hard_cuts(stripped, max_chars)]
        elif _TOOL_NOTE_LINE.match(stripped):
            # Runs of tool notes share a line: they are what was touched, not prose to read line by line.
            follows = bool(found) and found[-1].kind == "tool"
            found += [Unit(part, "tool", not follows and n == 0)
                      for n, part in enumerate(_hard_cuts(stripped, max_chars))]
        elif _LIST_ITEM.match(line):
            # A list item is one unit when it fits, like a sentence; a long one splits at its sentences.
            kind = "item"
            parts = [stripped] if len(stripped) <= max_chars else split_sentences(stripped, max_chars)
            found += [Unit(part, kind, n == 0) for n, part in enumerate(parts)]
        else:
            found += [Unit(part, "sentence", n == 0) for n, part in enumerate(split_sentences(stripped, max_chars))]
    return found


def join(found: list[Unit]) -> str:
    """Units back into text: sentences of one line on that line, everything else on lines of its own."""
    out: list[str] = []
    for unit in found:
        if out and not unit.starts_line:
            out[-1] += " " + unit.text
        else:
            out.append(unit.text)
    return "\n".join(out)
