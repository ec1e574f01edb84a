"""A JSON settings file's text changed in place: the members and elements that change are written, every other byte
(indentation, key order, blank lines, a missing final newline, comments where the agent allows them) is kept.

``patch(text, before, after)`` turns the text of `before` into a text of `after`, given both as parsed: a member
added goes at the end of its object, one removed takes its separator with it, a value that changed is rewritten
where it stands, and a list is changed element by element. What is written takes the file's own indentation and
spacing (a one-line object gets its new member on that line). Removing what was added gives the original bytes
back: the separator and the line break an addition brings are the ones a removal takes.

``loads(text, comments=True)`` reads JSON with ``//`` and ``/* */`` comments (the Gemini CLI's settings.json).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

Path = tuple[str | int, ...]  # keys and indexes from the top object down


class JsonTextError(ValueError):
    """Text that is not the JSON (or, with comments, the JSONC) it should be."""


@dataclass
class Node:
    """A value in the text: where it starts and ends, and (an object or a list) its items in order."""

    start: int
    end: int
    kind: str  # "object", "array" or "scalar"
    keys: list[str] = field(default_factory=list)  # an object's, in order
    items: list[Node] = field(default_factory=list)  # an object's values or a list's elements
    key_starts: list[int] = field(default_factory=list)  # where each member begins (its key's quote)
    commas: list[int] = field(default_factory=list)  # the separator after each item but the last


def without_comments(text: str) -> str:
    """The text with each comment's characters turned to spaces (line breaks kept): offsets stay the same."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            continue
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JsonTextError(f"a /* comment is not closed (at character {i})")
            end += 2
            out[i:end] = ["\n" if ch == "\n" else " " for ch in text[i:end]]
            i = end
            continue
        i += 1
    return "".join(out)


def loads(text: str, comments: bool = False) -> Any:
    """The text's value; JSON with comments when `comments` (json.JSONDecodeError when it is not valid)."""
    return json.loads(without_comments(text) if comments else text)


def _string_end(text: str, i: int) -> int:
    """The offset just past the string that opens at `i`."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            return j + 1
        j += 1
    raise JsonTextError(f"a string is not closed (at character {i})")


class _Parser:
    """Spans of the values of a text whose comments are blanked (so only whitespace lies between tokens)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t\r\n":
            self.i += 1

    def value(self) -> Node:
        self.skip()
        start = self.i
        c = self.text[start] if start < len(self.text) else ""
        if c == "{":
            return self._container(start, "object", "}")
        if c == "[":
            return self._container(start, "array", "]")
        if c == '"':
            self.i = _string_end(self.text, start)
            return Node(start, self.i, "scalar")
        while self.i < len(self.text) and self.text[self.i] not in ",]} \t\r\n":
            self.i += 1
        if self.i == start:
            raise JsonTextError(f"a value was expected at character {start}")
        return Node(start, self.i, "scalar")

    def _container(self, start: int, kind: str, closer: str) -> Node:
        node = Node(start, start, kind)
        self.i += 1
        self.skip()
        if self.text[self.i:self.i + 1] == closer:
            self.i += 1
            node.end = self.i
            return node
        while True:
            self.skip()
            if kind == "object":
                node.key_starts.append(self.i)
                key_node = self.value()
                node.keys.append(json.loads(self.text[key_node.start:key_node.end]))
                self.skip()
                if self.text[self.i:self.i + 1] != ":":
                    raise JsonTextError(f"':' was expected at character {self.i}")
                self.i += 1
            else:
                self.skip()
                node.key_starts.append(self.i)
            node.items.append(self.value())
            self.skip()
            c = self.text[self.i:self.i + 1]
            if c == ",":
                node.commas.append(self.i)
                self.i += 1
                continue
            if c == closer:
                self.i += 1
                node.end = self.i
                return node
            raise JsonTextError(f"',' or '{closer}' was expected at character {self.i}")


def parse(text: str) -> Node:
    """The top value's spans (comments allowed: they are blanked first)."""
    parser = _Parser(without_comments(text))
    return parser.value()


def _node(root: Node, path: Path) -> Node:
    node = root
    for step in path:
        node = node.items[node.keys.index(step) if isinstance(step, str) else step]
    return node


# ---------------------------------------------------------------- the file's style


def indent_unit(text: str) -> str:
    """The file's indentation step: the leading whitespace of its first indented line (two spaces if none)."""
    for line in text.splitlines()[1:]:
        lead = line[:len(line) - len(line.lstrip(" \t"))]
        if lead and line.strip():
            return lead
    return "  "


def _line_indent(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    line = text[line_start:offset]
    return line[:len(line) - len(line.lstrip(" \t"))]


def _multiline(text: str, node: Node) -> bool:
    """Whether the container's items stand on lines of their own (an empty one: whether its parent's do)."""
    if node.items:
        return "\n" in text[node.start:node.key_starts[0]]
    return "\n" in text


def _render(value: Any, text: str, indent: str, multiline: bool) -> str:
    """`value` as JSON in the file's style, its first line at the position, the rest indented by `indent`."""
    if not multiline:
        spaced = ": " in text or ", " in text
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))
    dumped = json.dumps(value, ensure_ascii=False, indent=indent_unit(text))
    return dumped.replace("\n", "\n" + indent)


def _member_text(key: str | int, value: Any, text: str, indent: str, multiline: bool) -> str:
    rendered = _render(value, text, indent, multiline)
    if isinstance(key, int):
        return rendered
    colon = ": " if (": " in text or multiline) else ":"
    return json.dumps(key, ensure_ascii=False) + colon + rendered


def _items_indent(text: str, node: Node) -> str:
    if node.items and _multiline(text, node):
        return _line_indent(text, node.key_starts[0])
    return _line_indent(text, node.start) + indent_unit(text)


def _after_line_comment(text: str, offset: int) -> int:
    """Past a comment that follows `offset` on the same line (it stays with the item before it), else `offset`."""
    blanked = without_comments(text)
    j = offset
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and blanked[j] == " " and text[j] == "/":
        end = j
        while end < len(text) and blanked[end] == " " and text[end] != "\n":
            end += 1
        # Back to the comment's own end (trailing spaces after it stay where they were).
        while end > j and text[end - 1] in " \t":
            end -= 1
        return end
    return offset


# ---------------------------------------------------------------- edits


def insert(text: str, path: Path, index: int, key: str | int, value: Any) -> str:
    """The text with a member (`key`) or an element added to the container at `path`, before its item `index`
    (its length: at its end)."""
    node = _node(parse(text), path)
    multiline = _multiline(text, node)
    indent = _items_indent(text, node)
    item = _member_text(key, value, text, indent, multiline)
    gap = "\n" + indent if multiline else (" " if ", " in text else "")
    if not node.items:
        close = "\n" + _line_indent(text, node.start) if multiline else ""
        inner = (gap if multiline else "") + item + close
        return text[:node.start + 1] + inner + text[node.end - 1:]
    if index >= len(node.items):
        last = node.items[-1].end
        after = _after_line_comment(text, last)
        return text[:last] + "," + text[last:after] + gap + item + text[after:]
    at = node.key_starts[index]
    return text[:at] + item + "," + gap + text[at:]


def remove(text: str, path: Path, index: int) -> str:
    """The text without item `index` of the container at `path`, with the separator that went with it."""
    node = _node(parse(text), path)
    if len(node.items) == 1:
        return text[:node.start + 1] + text[node.end - 1:]
    if index == len(node.items) - 1:
        comma = node.commas[index - 1]
        after = _after_line_comment(text, comma + 1)
        return text[:comma] + text[comma + 1:after] + text[node.items[index].end:]
    return text[:node.key_starts[index]] + text[node.key_starts[index + 1]:]


def replace(text: str, path: Path, value: Any) -> str:
    """The text with the value at `path` rewritten where it stands."""
    root = parse(text)
    node = _node(root, path)
    parent = _node(root, path[:-1])
    indent = _line_indent(text, parent.key_starts[parent.items.index(node)]) if path else ""
    return text[:node.start] + _render(value, text, indent, _multiline(text, parent)) + text[node.end:]


def patch(text: str, before: Any, after: Any, path: Path = ()) -> str:
    """`text` (whose value is `before`) changed into a text of `after`, touching only what differs."""
    if before == after:
        return text
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [k for k in before if k not in after]:
            text = remove(text, path, list(_node(parse(text), path).keys).index(key))
        for key, value in after.items():
            if key not in before:
                text = insert(text, path, len(_node(parse(text), path).items), key, value)
            elif before[key] != value:
                text = patch(text, before[key], value, (*path, key))
        return text
    if isinstance(before, list) and isinstance(after, list):
        return _patch_list(text, before, after, path)
    return replace(text, path, after)


def _patch_list(text: str, before: list, after: list, path: Path) -> str:
    keys = [json.dumps(item, sort_keys=True) for item in before]
    matcher = difflib.SequenceMatcher(None, keys, [json.dumps(item, sort_keys=True) for item in after],
                                      autojunk=False)
    # From the end: the indexes of what comes before an edit stay right.
    for op, i1, i2, j1, j2 in reversed(matcher.get_opcodes()):
        if op == "equal":
            continue
        if op == "replace" and i2 - i1 == j2 - j1:
            for offset in reversed(range(i2 - i1)):
                text = patch(text, before[i1 + offset], after[j1 + offset], (*path, i1 + offset))
            continue
        for index in reversed(range(i1, i2)):
            text = remove(text, path, index)
        for offset, item in enumerate(after[j1:j2]):
            text = insert(text, path, i1 + offset, i1 + offset, item)
    return text
