"""Where the project's file of a name is, when a call just failed on a path that is not there.

A session reads ``.planning/phases/12.6-per-file-ipns-metadata/12.6-CONTEXT.md`` and gets "File does not exist.";
two sessions earlier the project wrote ``12.6-CONTEXT.md`` in ``…/12.6-per-file-ipns-metadata-split/``. Without
being told, the agent lists folders and searches until it finds it (or concludes there is none). The processor
keeps the files the project's sessions read or changed, by file name, beside its lesson index
(``processor/recall/file_map.py``); right after a failed call the failure hook (``recall_hook/tool_failure.py``)
finds the path the call missed (``missing_path``) and tells where the project's file of that name is
(``where_lines``): "`…/12.6-per-file-ipns-metadata/12.6-CONTEXT.md` is not there: this project's `12.6-CONTEXT.md`
is `…-split/12.6-CONTEXT.md` (worked on 2026-02-16)".

Only a file name with an extension is looked up (a folder or a program has none), only a file an earlier session
worked on, and never one the project's folder shows is gone; when two files of the name fit the missed path
as well (``index.ts`` in two apps), nothing is told.

A folder named by a number or an id is looked up by it (``folder_key``): the agent guesses ``phases/12-mfa/`` (a
glob that matched nothing, an ``ls`` of a folder not there) where the project's phase 12 is
``phases/12-multi-factor-authentication/`` — the one folder of that parent an earlier session worked in whose name
starts with the same number (``folder_lines``).

Any other folder is looked up by its name, leading dots aside (``named_folder_key``): the agent searched
``.todos/`` for the project's todos, kept in ``.planning/todos/`` — the one folder of that name an earlier session
worked in, anywhere in the project (``named_folder_lines``).

Stdlib only and no ``re``: the hook's start-up is its cost.
"""

if __package__:
    from .failure_keys import PATH_MISSING
    from .hook_io import exists, is_dir
else:  # a hook's flat import (the kit's folder on sys.path)
    from failure_keys import PATH_MISSING
    from hook_io import exists, is_dir


def _join(root: str, path: str) -> str:
    return path if path.startswith("/") else root.rstrip("/") + "/" + path

# What a shell tool says before the path it could not open (``ls: cannot access 'x'``, ``sed: can't read x``).
_VERBS = ("cannot access ", "can't access ", "can't read ", "cannot open ", "can't open ", "cannot stat ",
          "open ", "stat ", "lstat ", "scandir ", "access ")
_NO_SUCH = "no such file or directory"
_GLOB = "*?[{"


def _plain_path(text: str) -> str | None:
    """`text` as one path (quotes and a leading verb dropped); None when it is no single, literal path."""
    text = text.strip().strip(",").strip()
    lowered = text.lower()
    for verb in _VERBS:
        if lowered.startswith(verb):
            text = text[len(verb):]
            break
    text = text.strip().strip("'\"`‘’“”").strip()
    if not text or any(c in text for c in _GLOB) or any(c.isspace() for c in text):
        return None
    return text


def missing_path(tool_name: object, tool_input: dict, error: str) -> str | None:
    """The path a failed call was given that is not there: a file tool's own path, or the one a shell command's
    error names; None when the error says no path is missing."""
    if not any(marker in error[:2000].lower() for marker in PATH_MISSING):
        return None
    if tool_name != "Bash":
        for key in ("file_path", "notebook_path", "path"):
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return _plain_path(value)
        return None
    for line in error[:2000].splitlines()[:40]:
        low = line.lower()
        at = low.find(_NO_SUCH)
        if at < 0:
            continue
        # After the words: zsh's "no such file or directory: ./run.sh", node's "…, open 'x'". Before them: "cat:
        # notes/a.md: No such file or directory", "ls: cannot access 'x': No such file or directory".
        after = line[at + len(_NO_SUCH):].lstrip(":").strip()
        named = _plain_path(after or line[:at].rstrip().rstrip(":").rsplit(": ", 1)[-1])
        if named:
            return named
    return None


def missing_folder(tool_name: object, tool_input: dict, error: str) -> str | None:
    """The folder a failed call named that is not there: the last literal folder of a shell glob that matched
    nothing (zsh's ``no matches found: phases/12-mfa/*-PLAN.md``), or a missed path without an extension."""
    if tool_name == "Bash":
        for line in error[:2000].splitlines()[:40]:
            at = line.find("no matches found: ")
            if at < 0:
                continue
            parts = line[at + len("no matches found: "):].strip().split("/")
            glob_at = next((i for i, part in enumerate(parts) if any(c in part for c in _GLOB)), len(parts))
            return "/".join(parts[:glob_at]) if 0 < glob_at < len(parts) and parts[glob_at - 1] else None
    missed = missing_path(tool_name, tool_input, error)
    return missed.rstrip("/") if missed and file_name(missed) is None else None


def folder_key(name: str) -> str | None:
    """The key a folder is looked up by: its name's first word (before a ``-`` or ``_``) when that holds a digit
    (``12`` of ``12-multi-factor-authentication``, ``0007`` of ``0007_add_users``), with a ``/``; else None."""
    word = name.replace("_", "-").split("-", 1)[0]
    return word + "/" if word and len(word) <= 16 and any(c.isdigit() for c in word) and word != name else None


def _one_folder(wanted: str, entries: list, root: str | None, session_id: str, fits) -> tuple[str, str] | None:
    """(path, day) of the one folder an earlier session worked in that `fits` the missed folder `wanted` (below the
    project's folder); None when it is there after all, the project had that very folder, or not exactly one fits."""
    on_disk = bool(root) and is_dir(root)
    if on_disk and is_dir(_join(root, wanted)):
        return None
    found: list[tuple[str, str]] = []
    for path, date, first_session in _entries(entries):
        if path == wanted:
            return None  # the project had that very folder
        if not fits(path) or first_session == session_id:
            continue
        if path not in [f[0] for f in found] and not (on_disk and not is_dir(_join(root, path))):
            found.append((path, date))
    return found[0] if len(found) == 1 else None


def folder_lines(missed: str, entries: list, root: str | None, session_id: str) -> list[tuple[str, str]]:
    """(id, line) of the one folder beside the missed one whose name starts with the same number, that an
    earlier session worked in; [] when there is none or more than one."""
    wanted = relative(missed.rstrip("/"), root)
    parent, _, name = wanted.rpartition("/")
    number = folder_key(name)
    one = _one_folder(wanted, entries, root, session_id,
                      lambda path: path.rpartition("/")[0] == parent and folder_key(path.rpartition("/")[2]) == number)
    if one is None:
        return []
    path, date = one
    return [("where:" + path + "/", f"- `{missed.rstrip('/')}/` is not there: this project's folder of that number "
                                   f"is `{_shown(path, missed, root)}/` (worked on {date[:10]}).")]


def named_folder_key(name: str) -> str | None:
    """The key a folder not named by a number is looked up by: its name without leading dots, with a ``dir:``
    before it (``dir:todos`` of ``.todos`` and of ``.planning/todos``; ``BookMinder`` is not ``bookminder``);
    None for a numbered one."""
    bare = name.lstrip(".")
    return "dir:" + bare if bare and len(bare) <= 64 and folder_key(name) is None else None


def named_folder_lines(missed: str, entries: list, root: str | None, session_id: str) -> list[tuple[str, str]]:
    """(id, line) of the one folder of the missed folder's name (leading dots aside) an earlier session worked in,
    elsewhere in the project: the agent looked for the project's todos in ``.todos/``, and they were in
    ``.planning/todos/``; [] when there is none or more than one."""
    wanted = relative(missed.rstrip("/"), root)
    if wanted.startswith(("/", "~", "../")):
        return []  # outside the project's folder (`/usr/local/bin/docker`): not one of its folders missed
    one = _one_folder(wanted, entries, root, session_id, lambda path: True)  # the map holds only that name's
    if one is None:
        return []
    path, date = one
    name = wanted.rpartition("/")[2].lstrip(".")
    return [("where:" + path + "/", f"- `{missed.rstrip('/')}/` is not there: this project's `{name}` folder is "
                                   f"`{_shown(path, missed, root)}/` (worked on {date[:10]}).")]


def file_name(path: str) -> str | None:
    """The name a path's file is looked up by: its last part, when that has an extension; else None."""
    name = path.rstrip("/").rpartition("/")[2]
    return name if len(name) >= 4 and "." in name[1:] and not name.endswith(".") else None


def relative(path: str, root: str | None) -> str:
    """`path` as the project's files are kept: below the project's folder, relative to it."""
    if root and path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1:]
    while path.startswith("./"):
        path = path[2:]
    return path


def _entries(entries: list) -> list[list[str]]:
    """The map's well-formed entries of a name: [path below the project's folder, day, first session]."""
    return [e for e in entries if isinstance(e, list) and len(e) == 3 and all(isinstance(v, str) for v in e)]


def _shown(path: str, missed: str, root: str | None) -> str:
    """A path of the project as the call named the one it missed: absolute when that was (a Read takes no other)."""
    return root.rstrip("/") + "/" + path if root and missed.startswith("/") and not path.startswith("/") else path


def _closeness(path: str, missed: str) -> int:
    """How much of the missed path's folder a path shares: leading folders first, then any folder name."""
    mine, theirs = path.split("/")[:-1], missed.split("/")[:-1]
    leading = 0
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            break
        leading += 1
    return leading * 100 + len(set(mine) & set(theirs))


def where_lines(missed: str, entries: list, root: str | None, session_id: str) -> list[tuple[str, str]]:
    """(id, line) of the file of the missed path's name an earlier session worked on that fits the missed path
    best (its folders); [] when there is none, or two fit as well."""
    name = file_name(missed)
    if name is None:
        return []
    wanted = relative(missed, root)
    on_disk = bool(root) and is_dir(root)  # not on this machine (a replay elsewhere): the index is all
    if on_disk and exists(_join(root, wanted)):
        return []  # it is there: the call failed for another reason
    found: list[tuple[int, str, str]] = []
    for path, date, first_session in _entries(entries):
        if path == wanted:
            return []  # the project had that very file: it went since, and the others of its name are other files
        if first_session == session_id or path.rpartition("/")[2] != name:
            continue
        if on_disk and not exists(_join(root, path)):
            continue  # moved or removed since
        found.append((_closeness(path, wanted), path, date))
    found.sort(key=lambda f: f[2], reverse=True)  # the newest first among files that fit as well
    found.sort(key=lambda f: f[0], reverse=True)
    if not found or (len(found) > 1 and found[0][0] == found[1][0]):
        return []  # `index.ts` in two folders that fit as well: no way to say which was meant
    _, path, date = found[0]
    return [("where:" + path, f"- `{missed}` is not there: this project's `{name}` is `{_shown(path, missed, root)}` "
                              f"(worked on {date[:10]}).")]
