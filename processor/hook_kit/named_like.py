"""How the project's files of a kind are named, before a call looks for them by a name pattern none of them fits.

cipher-box 02-12: `ls .planning/phases/12-multi-factor-authentication/*-PLAN.md` met "no matches found" — the
phase's plans are `12-PLAN-01.md`, `12-PLAN-02.md` — and the session listed the folder to find them. A day later
another session ran `ls -1 .planning/phases/12.2-*/*-PLAN.md 2>/dev/null | sort`, which printed nothing (no
failure to learn from) and needed two more listings to find `12.2-PLAN-01.md` (the labeller: it needed to know).

The files the project's sessions worked on are kept by name (``processor/recall/file_map.py``, ``<index>.paths``).
Before a shell call or a Glob whose pattern's file part names a kind of file — a word of three or more letters
or digits beside its wildcards and an extension: ``*-PLAN.md``, ``*_spec.py``, not ``*.md`` — when files of that
kind were worked on (the same extension, the word in their name) and none of them fits the pattern, nor does a
file of the project's folder on this machine, the newest is told: "`…/*-PLAN.md` matches no file this project's
sessions worked on: its files of that kind are named like `12-PLAN-01.md` (`.planning/phases/12-multi-…/12-PLAN-
01.md`, worked on 2026-02-12)." Silent when any fits: the pattern finds what it looks for.

Stdlib only and no ``re`` or ``fnmatch``: the hook's start-up is its cost.
"""

if __package__:
    from .hook_io import exists, is_dir, list_dir, loads
else:  # a hook's flat import (the kit's folder on sys.path)
    from hook_io import exists, is_dir, list_dir, loads

PREFIX = "named:"  # the id of what is told: the file named, below the project's folder
MIN_WORD = 3
_QUOTES = "'\""
_DISK_FOLDERS = 200  # folders of the project listed to see whether the pattern matches a file there


def patterns(tool_name: object, tool_input: object) -> list[str]:
    """The file-name patterns a call looks for: a shell command's words with a ``*`` (unquoted), a Glob's pattern."""
    if not isinstance(tool_input, dict):
        return []
    if tool_name == "Glob":
        pattern = tool_input.get("pattern")
        return [pattern] if isinstance(pattern, str) and "*" in pattern else []
    command = tool_input.get("command")
    if not isinstance(command, str) or "*" not in command:
        return []
    words = (w.partition("=")[2] if w.startswith("-") else w for w in command[:2000].split() if "*" in w)
    return [w.strip(_QUOTES) for w in words if kind_of(w.strip(_QUOTES))]  # `--include="*_spec.py"`: its value


def kind_of(pattern: str) -> tuple[str, str] | None:
    """(word, extension) of a pattern's file part (``*-PLAN.md`` → ``PLAN``, ``md``); None when it names no kind:
    no extension, a wildcard in it, or no word of ``MIN_WORD`` letters or digits beside the wildcards."""
    part = pattern.rstrip("/").rpartition("/")[2]
    stem, dot, extension = part.rpartition(".")
    if not dot or not stem or not extension.isalnum() or len(extension) > 5:
        return None
    word, best = "", ""
    for char in stem + "*":
        if char.isalnum():
            word += char
            continue
        if len(word) > len(best) and not word.isdigit():
            best = word
        word = ""
    return (best, extension) if len(best) >= MIN_WORD and "*" in stem else None


def fits(pattern: str, name: str) -> bool:
    """Whether `name` fits a shell pattern's ``*`` and ``?`` (no character classes)."""
    if not pattern:
        return not name
    head = pattern[0]
    if head == "*":
        return any(fits(pattern[1:], name[i:]) for i in range(len(name) + 1))
    return bool(name) and (head == "?" or head == name[0]) and fits(pattern[1:], name[1:])


def _on_disk(base: str, pattern: str) -> bool:
    """Whether a file below `base` fits the pattern (its folders' wildcards too; ``**`` any depth, ``.git`` and
    ``node_modules`` aside) — or the search stopped at its bound before it was through: then it may."""
    parts = [p for p in pattern.split("/") if p and p != "."]
    todo = [(base.rstrip("/") if not pattern.startswith("/") else "", 0)]
    listed = 0
    while todo:
        folder, at = todo.pop()
        part, last = parts[at], at + 1 == len(parts)
        if "*" not in part and "?" not in part:
            if last and exists(folder + "/" + part):
                return True
            if not last:
                todo.append((folder + "/" + part, at + 1))
            continue
        listed += 1
        if listed > _DISK_FOLDERS:
            return True  # not searched through: a file may fit
        if part == "**":
            todo.append((folder, at + 1))  # no folder at all
        for entry in list_dir(folder or "/"):
            if part == "**":
                if entry not in (".git", "node_modules") and is_dir(folder + "/" + entry):
                    todo.append((folder + "/" + entry, at))
            elif fits(part, entry):
                if last:
                    return True
                todo.append((folder + "/" + entry, at + 1))
    return False


def named_lines(pattern: str, paths_text: str, base: str | None) -> list[tuple[str, str]]:
    """(id, line) of the newest file of the pattern's kind the project's sessions worked on, when none of them fits
    it, nor a file below `base` (where the call runs) on this machine: `paths_text`, the project's ``.paths`` file.
    [] otherwise."""
    kind = kind_of(pattern)
    if kind is None:
        return []
    word, extension = kind
    name_pattern = pattern.rstrip("/").rpartition("/")[2]
    newest: tuple[str, str] | None = None  # (name, its line's list of files)
    for line in paths_text.split("\n")[1:]:
        quoted, tab, files = line.partition("\t")
        name = quoted[1:-1]
        if not tab or len(quoted) < 2 or "/" in name or ":" in name or not name.endswith("." + extension):
            continue  # a folder's or a branch's line, or another kind of file
        if word not in name:
            continue
        if fits(name_pattern, name):
            return []  # a file of that kind fits: the pattern finds what it looks for
        newest = newest or (name, files)  # the map lists the most recently worked on first
    if newest is None or (base and is_dir(base) and _on_disk(base, pattern)):
        return []
    name, files = newest
    try:
        path, day, _ = loads(files)[0]
    except (ValueError, TypeError, IndexError):
        return []
    if not isinstance(path, str) or not isinstance(day, str):
        return []
    return [(PREFIX + path, f"- `{pattern}` matches no file this project's sessions worked on: its files of that kind "
                            f"are named like `{name}` (`{path}`, worked on {day[:10]}).")]
