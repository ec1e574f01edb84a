"""Claude Code's auto memory on disk: which files (`<project>/memory/*.md`), read safely, split into sections.

Claude Code writes MEMORY.md and topic files in each project's ``memory/`` folder. Engram only reads
them (never opens them for writing). What cannot be read as Markdown is reported once through the
capture-problems registry: a symbolic link out of the memory folder or a non-regular file is skipped
without being read, a binary file (NUL bytes) is skipped, a file over the size limit is read up to it,
and lines that are not valid UTF-8 are skipped, each alone: everything else in the file still counts.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from processor.capture.claude import ClaudeFormat
from processor.capture.problems import CaptureProblems, file_type

MEMORY_FOLDER = "memory"
MAX_SECTION_CHARS = 2000  # one section's text, as a memory, is cut to this
# Problems only reading an auto-memory file reveals; each is resolved when a later read no longer meets it.
OUTSIDE, NOT_REGULAR, BINARY, TRUNCATED, BAD_UTF8 = (
    "automem_outside", "automem_not_regular", "automem_binary", "automem_truncated", "automem_bad_utf8")
AUTOMEM_KINDS = (OUTSIDE, NOT_REGULAR, BINARY, TRUNCATED, BAD_UTF8)


def cite(path: str | os.PathLike[str], heading: str) -> str:
    """How a section is named for the agent: ``MEMORY.md § Heading``."""
    name = os.path.basename(path)
    return f"{name} § {heading}" if heading else name


def memory_folders(claude_transcripts: ClaudeFormat) -> list[Path]:
    """Every project's auto-memory folder that exists, Engram's own job folders left out."""
    try:
        entries = list(os.scandir(claude_transcripts.root))
    except OSError:
        return []
    found = []
    for entry in entries:
        if claude_transcripts.is_own_agent_dir(entry.name):
            continue
        folder = Path(entry.path) / MEMORY_FOLDER
        if os.path.isdir(folder):  # False, not an error, for an unreadable project folder
            found.append(folder)
    return sorted(found)


def memory_folder_of(path: Path, claude_transcripts: ClaudeFormat) -> Path | None:
    """The auto-memory folder a file event's path is in (``<root>/<project>/memory/<name>.md``), else None."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(claude_transcripts.root)
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) != 3 or parts[1] != MEMORY_FOLDER or not parts[2].endswith(".md"):
        return None
    if claude_transcripts.is_own_agent_dir(parts[0]):
        return None
    return claude_transcripts.root / parts[0] / MEMORY_FOLDER


def memory_files(folder: Path) -> list[Path]:
    """The Markdown files directly in an auto-memory folder (not yet checked: see `read_memory_file`)."""
    try:
        return sorted(Path(e.path) for e in os.scandir(folder)
                      if e.name.endswith(".md") and not e.name.startswith("."))
    except OSError:
        return []


@dataclass(frozen=True)
class MemoryFile:
    path: Path
    size: int
    mtime_ns: int
    sha256: str
    lines: list[str | None]  # 1-based line i is lines[i - 1]; None: not valid UTF-8, skipped


@dataclass(frozen=True)
class ReadResult:
    status: str  # read | unchanged (same size and mtime) | gone (no such file) | skipped (a problem, reported)
    file: MemoryFile | None = None
    size: int = 0
    mtime_ns: int = 0


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def read_memory_file(path: Path, folder: Path, max_bytes: int, problems: CaptureProblems,
                     known: tuple[int, int] | None = None) -> ReadResult:
    """Read one auto-memory file safely; `known` = (size, mtime_ns) when it was last read."""
    met: dict[str, str] = {}
    try:
        result = _read(path, folder, max_bytes, known, met)
    finally:
        for kind, detail in met.items():
            problems.report(path, kind, detail)
        problems.resolve(path, [k for k in AUTOMEM_KINDS if k not in met])
    return result


def _read(path: Path, folder: Path, max_bytes: int, known: tuple[int, int] | None,
          met: dict[str, str]) -> ReadResult:
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        return ReadResult("gone")
    except OSError:
        return ReadResult("skipped")
    if stat.S_ISLNK(link.st_mode):
        target = os.path.realpath(path)
        if not _inside(target, os.path.realpath(folder)):
            met[OUTSIDE] = (f"symbolic link to {target}, outside the auto-memory folder; skipped without reading "
                            "it (Engram reads only files inside the folder)")
            return ReadResult("skipped")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ReadResult("gone")
    except OSError:
        return ReadResult("skipped")
    if not stat.S_ISREG(st.st_mode):
        met[NOT_REGULAR] = f"is {file_type(st.st_mode)}, not a Markdown file; skipped without opening it"
        return ReadResult("skipped")
    if known is not None and known == (st.st_size, st.st_mtime_ns):
        return ReadResult("unchanged", size=st.st_size, mtime_ns=st.st_mtime_ns)
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat must not block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                met[NOT_REGULAR] = "is not a regular file; skipped"
                return ReadResult("skipped")
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        return ReadResult("gone")
    except OSError as exc:
        met[NOT_REGULAR] = f"cannot be read ({exc.strerror or exc}); skipped"
        return ReadResult("skipped")
    if b"\0" in data:
        met[BINARY] = "holds binary data (NUL bytes), not Markdown; skipped"
        return ReadResult("skipped")
    if len(data) > max_bytes:
        cut = data.rfind(b"\n", 0, max_bytes)
        data = data[: cut + 1] if cut >= 0 else b""
        kept = data.count(b"\n")
        met[TRUNCATED] = (f"is {st.st_size} bytes, over automem_max_bytes ({max_bytes}); only its first "
                          f"{kept} lines are read")
    lines: list[str | None] = []
    bad: list[int] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            lines.append(None)
            bad.append(number)
    if lines and lines[-1] == "":
        lines.pop()
    if bad:
        met[BAD_UTF8] = (f"{len(bad)} line(s) are not valid UTF-8 (first: line {bad[0]}); those lines are skipped, "
                         "the rest is read")
    return ReadResult("read", MemoryFile(path, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest(), lines),
                      st.st_size, st.st_mtime_ns)


# ---- sections -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Section:
    """One fact as the file states it: a top-level list item (with its sub-items) or a paragraph."""

    heading: str  # the nearest heading above it ('' before the first)
    line_start: int  # 1-based, inclusive
    line_end: int
    text: str  # list marker removed; not yet redacted
    headings: list[str] = field(default_factory=list)  # the heading path, outermost first


_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"^( {0,1})(?:[-*+]|\d{1,9}[.)])[ \t]+")
_RULE = re.compile(r"^ {0,3}(?:[-*_][ \t]*){3,}$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def sections(lines: list[str | None]) -> list[Section]:
    """The file's sections, in order; headings, rules and front matter are context, not facts."""
    found: list[Section] = []
    path: list[tuple[int, str]] = []  # (level, heading)
    block: list[tuple[int, str]] = []
    fence = ""

    def flush() -> None:
        if not block:
            return
        first = _ITEM.sub("", block[0][1], count=1).strip()
        rest = [line for _, line in block[1:]]
        base = min((_indent(line) for line in rest if line.strip()), default=0)
        text = "\n".join([first, *(line[base:] for line in rest)]).strip()
        if len(re.sub(r"[\W_]+", "", text)) >= 3:
            if len(text) > MAX_SECTION_CHARS:
                text = text[: MAX_SECTION_CHARS - 1] + "…"
            headings = [h for _, h in path]
            found.append(Section(headings[-1] if headings else "", block[0][0], block[-1][0], text, headings))
        block.clear()

    start = 0
    if lines and lines[0] is not None and lines[0].strip() == "---":  # YAML front matter
        for i in range(1, len(lines)):
            if lines[i] is not None and lines[i].strip() in ("---", "..."):
                start = i + 1
                break
    for number, line in enumerate(lines[start:], start + 1):
        if line is None:  # a line that could not be decoded ends what it was part of
            flush()
            continue
        if fence:
            block.append((number, line))
            if line.strip().startswith(fence):
                fence = ""
            continue
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group(1)[0] * 3
            block.append((number, line))
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, heading.group(2).strip()))
            continue
        if not line.strip() or _RULE.match(line):
            flush()
            continue
        if _ITEM.match(line):
            flush()
        block.append((number, line))
    flush()
    return found
