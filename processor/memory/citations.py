"""What a memory cites in the code: file paths, symbols (functions, classes, settings) and commands.

Read from the memory's text and entities with no model: backticked spans, things shaped like a
path (``processor/jobs/queue.py``) and identifiers shaped like code (``snake_case``, ``CamelCase``,
``call()``). Ordinary words are never symbols, so a memory with no code in it cites nothing and
the inquisitor leaves it alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_BACKTICKED = re.compile(r"`([^`\n]{1,200})`")
_PATH = re.compile(r"(?<![\w/.~$-])((?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,8}|[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|go|rs|"
                   r"rb|java|kt|c|h|cc|cpp|hpp|cs|swift|md|toml|yaml|yml|json|sh|sql|cfg|ini|txt))(?![\w/])")
_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(\(\))?")
_CODE_SHAPED = re.compile(r"^(?:[a-z0-9]+(?:_[a-z0-9]+)+|_+[A-Za-z0-9_]+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|"
                          r"[a-z]+(?:[A-Z][a-z0-9]*)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)$")
_COMMAND_WORDS = frozenset("git python python3 pip npm npx yarn pnpm cargo go make engram pytest ruff uv docker "
                           "kubectl bash sh node".split())
MAX_CITATIONS = 20


@dataclass(frozen=True)
class Citations:
    paths: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.paths or self.symbols or self.commands)


def _relative(path: str, root: str | None) -> str | None:
    """A path as the repository names it; None for one outside the project (a home folder, /tmp)."""
    path = path.strip().strip("'\"").rstrip(".,:;)")
    if path.startswith(("~", "$")) or "://" in path:
        return None
    if os.path.isabs(path):
        if not root:
            return None
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            return None
        return None if rel.startswith("..") else rel
    return path.removeprefix("./")


def extract(text: str, entities: list[str] | tuple[str, ...] = (), root: str | None = None) -> Citations:
    """The paths, symbols and commands a memory cites (at most MAX_CITATIONS of each)."""
    paths: list[str] = []
    symbols: list[str] = []
    commands: list[str] = []
    spans = [m.group(1) for m in _BACKTICKED.finditer(text)] + [e for e in entities if e]

    def add(bucket: list[str], value: str) -> None:
        if value and value not in bucket and len(bucket) < MAX_CITATIONS:
            bucket.append(value)

    for span in spans:
        words = span.split()
        if len(words) > 1 and words[0] in _COMMAND_WORDS:
            add(commands, span.strip())
    for source in [text, *spans]:
        for m in _PATH.finditer(source):
            rel = _relative(m.group(1), root)
            if rel:
                add(paths, rel)
    path_parts = {p for path in paths for p in re.split(r"[/.]", path)}
    for span in spans:
        if len(span.split()) != 1 or _PATH.fullmatch(span.strip()):
            continue
        m = _IDENT.fullmatch(span.strip())
        if m:
            name = m.group(1).rsplit(".", 1)[-1]
            if len(name) >= 3 and (m.group(2) or _CODE_SHAPED.match(name) or "." in m.group(1)):
                add(symbols, name)
    for m in _IDENT.finditer(text):  # code-shaped words outside backticks: snake_case, CamelCase, call()
        name = m.group(1).rsplit(".", 1)[-1]
        if len(name) >= 4 and (m.group(2) or _CODE_SHAPED.match(name)) and name not in path_parts:
            add(symbols, name)
    return Citations(tuple(paths), tuple(symbols), tuple(commands))


def missing_paths_on_disk(root: str | None, citations: Citations) -> list[str]:
    """The cheap check a recollection uses: cited repository paths (with a folder) not on disk under root.

    Bare file names are not judged (``queue.py`` may live anywhere in the tree), nor is anything when
    root is not a folder on this machine.
    """
    if not root or not os.path.isdir(root):
        return []
    return [p for p in citations.paths if "/" in p and not os.path.exists(os.path.join(root, p))]
