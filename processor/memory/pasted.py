"""Pasted output and very large messages: kept whole with their message, shown to search as a short note.

A user message often carries material the user did not write: a pytest log inside ``<bash-stdout>``, a
HAR file, a diff, a docs page. Chunked like prose, one paste became up to eight episodes whose test
names and JSON keys outranked the sentences that state a decision. Here such a block becomes an
attachment of its message: the captured message keeps every character (``memory_expand msg_<uuid>`` and
``engram expand msg_<uuid>`` show it), and the episode holds one line in its place, ``[pasted …]``, with the
paste's size, its first and last lines (a test run's verdict is its last line), the identifiers it names
(failing tests, files, error types), so it stays findable by them, and that id.

What counts as pasted:
- a block Claude Code wraps in a tag of its own (``<bash-stdout>``, ``<ide_selection>``: a name with
  ``-`` or ``_``) of more than MIN_CHARS;
- a run of lines that are not prose (log and test lines, tracebacks, diff and JSON lines, indented code,
  fenced blocks) of more than MIN_CHARS and MIN_LINES;
- of a message still longer than LARGE_CHARS after that (a pasted page of prose), everything between its
  opening and its closing paragraphs: the user's own framing is what they wrote first and last.
Pure functions; any text (no newlines, one megabyte, binary-looking) comes out bounded.
"""

from __future__ import annotations

import re
from collections import Counter

MIN_CHARS = 400
MIN_LINES = 6
LARGE_CHARS = 3_000
KEEP_HEAD_CHARS = 1_200  # of a large message: its opening paragraphs, up to this much
KEEP_TAIL_CHARS = 600  # and its closing ones
NOTE_PREFIX = "[pasted "
_EDGE_CHARS = 90  # of the first and last line quoted in a note
_NAMES_CHARS = 160
_NAMES = 8
_NAMES_SCAN_CHARS = 100_000  # of a paste, read for its names: a megabyte one says what it is in its head
# What a paste says counts this much of what the user or the assistant wrote, in ranking as in bites: a
# piece that is mostly a note ranks below prose that states the same names.
PASTE_WEIGHT = 0.5

_TAG_BLOCK = re.compile(r"<([A-Za-z][A-Za-z0-9]*[_-][\w-]*)(?:\s[^>\n]*)?>(.*?)(?:</\1>|\Z)", re.S)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# A line of output or code rather than prose: logs, test reports, tracebacks, diffs, JSON, prompts, rules.
OUTPUT_LINE = re.compile(
    r"^\s*(?:\$ |>|#\s|\d{4}-\d\d-\d\d[ T]\d|\[?\d\d:\d\d:\d\d|Traceback |File \"|at [\w$.]+\(|"
    r"E  |FAILED|PASSED|ERROR|WARNING|INFO|DEBUG|[=_\-*~]{4,}|\w+(?:/\w+)*\.\w+:\d+|\w+::\w+|[{}\[\]<|]|"
    r"[+-]{1,3}\s|[+-]{3}|@@|diff --git |index [0-9a-f]{7}|\"[\w-]+\":|\d+\s*\|)")
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)
_IDENT = re.compile(r"[A-Za-z_][\w.:/\[\]-]*[\w\]]")
_SIGNAL_LINE = re.compile(r"FAILED|ERROR|Error\b|error\b|Exception|failed|Traceback")
_NOTE_LINE = re.compile(r"^[ \t]*\[pasted [^\n]*\][ \t]*$", re.M)


def is_note(line: str) -> bool:
    """A stripped line that is a paste's note (as ``note`` writes it)."""
    return line.startswith(NOTE_PREFIX) and line.endswith("]")


def without_notes(text: str) -> str:
    """The user's own words of a condensed message: its paste notes left out."""
    return _NOTE_LINE.sub("", text)


def paste_share(content: str) -> float:
    """How much of a piece's text is paste notes, in [0, 1]."""
    notes = sum(len(m) for m in _NOTE_LINE.findall(content))
    return min(notes / len(content), 1.0) if content else 0.0


def _not_prose(line: str) -> bool:
    stripped = line[:2_000].strip()  # a line's head says what it is (a megabyte line is not read whole)
    if not stripped:
        return False
    if OUTPUT_LINE.match(line) or line[0] in " \t":  # indented: code, a diff's context, a log's detail
        return True
    letters = len(_LETTERS.findall(stripped))
    return letters < len(stripped) * 0.5  # mostly digits, punctuation, symbols: data, not words


def _edge(line: str, last: bool = False) -> str:
    line = line[-4 * _EDGE_CHARS:] if last else line[: 4 * _EDGE_CHARS]
    line = " ".join(line.split()).strip("=_-*~ ")
    return line if len(line) <= _EDGE_CHARS else line[: _EDGE_CHARS - 1].rstrip() + "…"


def _names(block: str) -> list[str]:
    """What a paste is about, as identifiers: those on failure/error lines first, then the most repeated."""
    signal: list[str] = []
    counts: Counter[str] = Counter()
    for line in block[:_NAMES_SCAN_CHARS].split("\n"):
        found = [name for name in (_short(m) for m in _IDENT.findall(line)) if _is_identifier(name)]
        counts.update(found)
        if _SIGNAL_LINE.search(line):
            signal += [f for f in found if f not in signal]
    ordered = signal + [name for name, _ in counts.most_common() if name not in signal]
    out: list[str] = []
    size = 0
    for name in ordered:
        if name in out or size + len(name) + 2 > _NAMES_CHARS:
            continue
        out.append(name)
        size += len(name) + 2
        if len(out) >= _NAMES:
            break
    return out


def _is_identifier(token: str) -> bool:
    """A code name rather than a word: a path, a dotted or snake_case name, camelCase, Test::ids."""
    if len(token) < 4 or token.startswith("http") or not _LETTERS.search(token):
        return False
    camel = any(a.islower() and b.isupper() for a, b in zip(token, token[1:], strict=False))
    return camel or any(c in token for c in "_./:")


def _short(token: str) -> str:
    token = token.rstrip(".:")
    if "::" in token:  # test/test_x.py::TestY::test_z → TestY::test_z
        return "::".join(token.split("::")[-2:]).rsplit("/", 1)[-1]
    return token.rsplit("/", 1)[-1] if "/" in token else token


def note(block: str, what: str) -> str:
    """The one line a paste leaves in an episode: what it is, how big, its first and last lines, its names."""
    lines = [line for line in block.split("\n") if _LETTERS.search(line)]
    parts = [f"{NOTE_PREFIX}{what}, {block.count(chr(10)) + 1:,} lines, {len(block):,} characters"]
    if lines:
        first, last = _edge(lines[0]), _edge(lines[-1], last=True)
        parts.append(f'starts "{first}"' + (f' / ends "{last}"' if len(lines) > 1 and last != first else ""))
    names = _names(block)
    if names:
        parts.append("names " + ", ".join(names))
    return " — ".join(parts).replace("\n", " ") + "]"


def _tagged(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        inner = match.group(2).strip()
        if not inner:  # an empty <bash-stderr></bash-stderr>: nothing was said
            return ""
        if len(inner) < MIN_CHARS:
            return match.group(0)
        return f"\n{note(inner, match.group(1))}\n"
    return _TAG_BLOCK.sub(replace, text)


def _runs(text: str) -> str:
    """Runs of non-prose lines (fenced blocks whole) long enough to be a paste, each as its note."""
    lines = text.split("\n")
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        body = "\n".join(run).strip("\n")
        if len(body) >= MIN_CHARS and sum(1 for line in run if line.strip()) >= MIN_LINES:
            out.append(note(body, "output" if not _FENCE.match(run[0]) else "code"))
        else:
            out.extend(run)
        run.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            marker = _FENCE.match(line).group(1)  # type: ignore[union-attr]
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(marker[0] * len(marker)):
                end += 1
            flush()
            run.extend(lines[i:end + 1])
            flush()
            i = end + 1
            continue
        if is_note(line.strip()):
            flush()
            out.append(line)
        elif _not_prose(line) or (not line.strip() and run):
            run.append(line)
        else:
            flush()
            out.append(line)
        i += 1
    flush()
    return "\n".join(out)


def _large(text: str) -> str:
    """A message still over LARGE_CHARS: its opening and closing paragraphs, the middle as a paste."""
    if len(text) <= LARGE_CHARS:
        return text
    paragraphs = re.split(r"\n\s*\n", text)
    head: list[str] = []
    size = 0
    for paragraph in paragraphs:
        if head and size + len(paragraph) > KEEP_HEAD_CHARS:
            break
        head.append(paragraph)
        size += len(paragraph) + 2
    tail: list[str] = []
    size = 0
    for paragraph in reversed(paragraphs[len(head):]):
        if size + len(paragraph) > KEEP_TAIL_CHARS:
            break
        tail.insert(0, paragraph)
        size += len(paragraph) + 2
    middle = paragraphs[len(head): len(paragraphs) - len(tail)]
    if len(head) == 1 and len(head[0]) > KEEP_HEAD_CHARS:  # one huge paragraph: keep its start only
        cut = head[0][:KEEP_HEAD_CHARS]
        space = cut.rfind(" ")
        cut = cut[:space] if space > KEEP_HEAD_CHARS // 2 else cut
        middle = [head[0][len(cut):]] + middle
        head = [cut]
    if not middle:
        return text
    return "\n\n".join([*head, note("\n\n".join(middle).strip(), "text"), *tail])


def condense(text: str) -> str:
    """A user message with every paste in it replaced by its note (the message itself is not changed)."""
    if len(text) < MIN_CHARS:
        return text
    return _large(_runs(_tagged(text)))


def with_whole(condensed: str, whole: str) -> str:
    """Each note of a condensed message ends with the id that expands to the whole message (``msg_<uuid>``)."""
    return _NOTE_LINE.sub(lambda m: f"{m.group(0).rstrip()[:-1]} — whole: {whole}]", condensed)
