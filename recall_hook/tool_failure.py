"""Engram's PostToolUseFailure hook: right after a tool call fails, what fixed the same failure before.

Claude Code runs it after a tool call fails, with the error (``{"session_id", "cwd", "tool_name", "tool_input",
"tool_use_id", "error", "is_interrupt", ...}``); its ``hookSpecificOutput.additionalContext`` reaches the model
beside the failed result. It is the moment with no doubt at all: the agent has just met the failure, and an
earlier session of the project met the same one and got past it.

The failure is known by its call key and signature (``processor/hook_kit/failure_keys.py``: the program, the error
lines with paths, numbers and names masked). The project's lesson index (``processor/recall/lesson_index.py``, named
by the session's recollection file, or found from the event's ``cwd`` before there is one) files each fix under its
failure key with the signature it fixed; the hook reads that one line and tells the fixes whose signature is this
failure's: "This failed the same way on <date>; what fixed it: …" (or, for a program not found that the project runs
in the environment another's fix activated, "`python` was not found the same way on <date>; …"). When no fix is
known and the call missed a path, it tells where the project's file of that name is, or the folder of the number it
guessed (``processor/hook_kit/where_files.py``: "`…/12.6-CONTEXT.md` is not there: this project's `12.6-CONTEXT.md`
is `…`"), or, after a ``git checkout`` of a branch that is not there, the project's branch of that number
(``processor/hook_kit/branches.py``). A shell call that ran in a folder below its checkout's, with a path from the
checkout's folder (Claude Code's shell kept an earlier ``cd``), and missed it, is told where it ran and how to run
it (``tool_keys.ran_below``: no earlier session needed). A read the harness refused for the file's size is told the
project's other files known too big for it, beside the refused one; a sub-agent whose result says one of its reads
was, the folders that hold such files (``_too_big_too``): Claude Code's sub-agent returns rather than fails, so this
hook is its ``PostToolUse`` too (matcher ``Task|Agent``: ``hook_io.failed_call`` reads the refusal at the head of
its result). Never a fix learned in this same session (it is in the agent's context), never one already told in this
session (``<session>.shown``, shared with the PreToolUse hook), never for a call the user declined or interrupted,
or the editor's own mechanics.

The other agents have no event for a failed call alone, so the failure is read from the call's result
(``processor/hook_kit/hook_io.py`` ``failed_call``): the Codex CLI runs this hook as its ``PostToolUse`` of
a shell call (matcher ``Bash``; ``tool_failure.py codex``), and the Gemini CLI's ``AfterTool`` hook is
``pretooluse.py gemini``, which tells the fix beside the call's lessons (``told_fixes``), as opencode's plugin and
pi's extension do after every call. opencode's plugin also runs this hook for a tool that threw (opencode gives
it no ``tool.execute.after``: the fix is appended to the error the model reads).

Registered like the other hooks as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/tool_failure.py``:
stdlib only (the hooks' kit), no ``re``. It never changes a permission decision and, on any failure of its own,
exits 0 saying nothing.
"""

import sys

if __package__:  # imported as recall_hook.tool_failure (tests, tools)
    from processor.hook_kit import failure_keys as _fail
    from processor.hook_kit import hook_io as _io
else:  # run through LAUNCHER: the kit's folder goes on sys.path, its modules imported flat (no package __init__)
    sys.path.insert(0, (__file__.rpartition("/")[0] or ".") + "/../processor/hook_kit")
    try:
        import failure_keys as _fail
        import hook_io as _io
    except ImportError:  # no kit beside this hook (a moved or half-removed Engram): exit 0, saying nothing
        _io = None

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import tool_failure;tool_failure.main()'
MAX_FIXES = 2
MAX_FILES_NAMED = 3  # a folder's files too big to read, named in its one line after a sub-agent's refusal
_TARGET_KEYS = ("command", "file_path", "notebook_path", "path", "url", "pattern")


def run(stdin: bytes) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    begun = _io.event_of(stdin)
    if begun is None:
        return None
    event, directory, session_id = begun
    told = told_fixes(event, directory, session_id)
    if told is None:
        return None
    return _io.answer(event, _io.FAILED_TOOL, told[1], told[0], directory.rpartition("/")[0])


def told_fixes(event: dict, directory: str, session_id: str) -> tuple[list[str], str] | None:
    """What fixed this failed call's failure in earlier sessions, claimed as told in this session: (the memories'
    ids, the fenced text), or None when the call did not fail or nothing new is known about its failure."""
    failed = _io.failed_call(event)
    if failed is None:
        return None
    tool_name, error = failed
    call = _io.call_of(event)  # the input under Claude Code's keys (opencode's filePath is file_path)
    tool_input = call[1] if call is not None else {}
    target = next((v for k in _TARGET_KEYS if isinstance(v := tool_input.get(k), str) and v.strip()), None)
    if _fail.read_refused(tool_name, error):
        return _too_big_too(event, directory, session_id, target if tool_name not in _fail.SUB_AGENTS else None)
    if not error.strip() or _fail.not_a_failure(tool_name, error):
        return None
    key = _fail.call_key(tool_name, target, error)
    signature = _fail.call_signature(tool_name, target, error)
    if (key is None or not signature) and not _fail.says_missing(error):
        return None
    index, root = _index_of(directory, session_id, event)
    lowered = error[:4000].lower()
    cwd = event.get("cwd")  # a folder below its checkout's: most calls run at the checkout, and `tool_keys` waits
    moved = _io.kit("tool_keys").ran_below(target, cwd) if tool_name == "Bash" and target and isinstance(cwd, str) \
        and cwd.rstrip("/") != (root or "").rstrip("/") and _fail.says_path_missing(lowered) else None
    if moved is not None:  # not a lesson of an earlier session: where this call ran, which its paths did not expect
        below, above = moved
        if _io.opted_out(directory, session_id) or not _io.claim_shown(directory, session_id, ["cwd:" + below]):
            return None
        return ["cwd:" + below], _io.format_ran_below(below, above, _io.agent())
    # A call that went to another folder first (a sibling checkout) and failed there: what worked here is told with
    # a word that it ran elsewhere, and nothing of where this project's files are.
    elsewhere = _io.kit("tool_keys").leaves_project(target, root) if tool_name == "Bash" and target \
        and target.lstrip().startswith("cd /") and not _fail.refused_cd(lowered) and not _fail.failed_cd(lowered) \
        else None
    entries = _filed(directory, index, _fail.failure_key(key, error)) if key is not None and signature else []
    fits: list[tuple[dict, str]] = []
    shown, _ = _io.load_shown(directory, session_id)
    for entry in entries:  # the cheap checks first: most entries under a key are other failures' fixes
        if (not isinstance(entry, dict) or not isinstance(entry.get("sig"), list) or entry.get("session") == session_id
                or entry.get("id") in shown or any(entry.get("id") == e["id"] for e, _ in fits)):
            continue
        if not _fail.same_failure([str(s) for s in entry["sig"]], signature) and not _outside(entry, target, error):
            continue
        if _io.set_up_gone(entry, root):
            continue
        line = _told(entry)
        if line is not None:
            fits.append((entry, line))
    fits = _one_environment(fits)[:MAX_FIXES]
    lines, ids = [line for _, line in fits], [entry["id"] for entry, _ in fits]
    branch = [] if ids or elsewhere or tool_name != "Bash" else \
        _missed_branch(target or "", error, directory, index, session_id)
    where = [] if ids or branch or elsewhere or not _fail.says_missing(error) else \
        _missed_where(tool_name, tool_input, error, directory, index, root, session_id)
    if not (ids or where or branch) or _io.opted_out(directory, session_id):
        return None
    fresh = _io.claim_shown(directory, session_id, ids or [i for i, _ in where + branch])  # once a session
    if where or branch:
        lines = [line for i, line in where + branch if i in fresh]
        context = _io.format_where_context if where else _io.format_branch_context
        return ([], context(lines, _io.agent())) if lines else None
    lines = [line for line, i in zip(lines, ids, strict=True) if i in fresh]
    if not lines:
        return None
    if elsewhere:  # said in the fix's own line, so that a reader of any one line has it
        said, found, its_id = lines[0].rpartition(" (id: ")
        note = f" That call ran in `{elsewhere}`, outside this project's folder: it may need that folder's own set-up."
        lines[0] = f"{said}{note}{found}{its_id}" if found else lines[0] + note
    return fresh, _io.format_failure_context(lines, _io.agent())


def _too_big_too(event: dict, directory: str, session_id: str, path: str | None) -> tuple[list[str], str] | None:
    """After a read refused for the file's size, the project's other files known too big for it: those beside
    the refused file (a folder of day-by-day logs), or, when a sub-agent met the refusal (its result does not say
    which file), the project's folders that hold such files, each as a folder (``_folder_line``): naming one file
    as if it were the refused one misleads. The refused file's own refusal says what to do; its siblings' is what
    it does not."""
    index, root = _index_of(directory, session_id, event)
    if path and root and path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1:]
    folder = path.rpartition("/")[0] if path else None
    shown, _ = _io.load_shown(directory, session_id)
    entries: list[dict] = []
    for entry in _filed(directory, index, _io.READ_REFUSED):
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or entry.get("session") == session_id \
                or entry.get("id") in shown or any(entry.get("id") == e.get("id") for e in entries):
            continue
        if path is not None and (entry["file"] == path or entry["file"].rpartition("/")[0] != folder):
            continue
        if _io.bite_line(entry) is not None:
            entries.append(entry)
    if path is None:  # a sub-agent's: each folder once, all its files in one line
        by_folder: dict[str, list[dict]] = {}
        for entry in entries:
            by_folder.setdefault(entry["file"].rpartition("/")[0], []).append(entry)
        told = [(group, _folder_line(name, group)) for name, group in by_folder.items()]
    else:
        told = [([entry], _io.bite_line(entry)) for entry in entries]
    told = [(group, line) for group, line in told if line is not None][:MAX_FIXES]
    if not told or _io.opted_out(directory, session_id):
        return None
    fresh = _io.claim_shown(directory, session_id, [e["id"] for group, _ in told for e in group])
    lines = [line for group, line in told if group[0]["id"] in fresh]
    return (fresh, _io.format_too_big_context(lines, _io.agent())) if lines else None


def _folder_line(folder: str, entries: list[dict]) -> str | None:
    """The line of a folder's files too big for the read tool, told after a sub-agent's read was refused, under
    the first file's memory id: "Files in `claude-dev-log-diary/` are too big for Read to take whole: `day-002.md`
    (56293 tokens); the limit is 25000. Search them with Grep, or read parts with offset and limit; a sub-agent
    sent to read one whole meets the same limit." (a file at the project's top: "Files at this project's top …")."""
    named, limit = [], ""
    for entry in entries[:MAX_FILES_NAMED]:
        size = str(entry.get("bite") or "").partition(" whole (")[2].partition(")")[0]  # "56293 tokens; the limit …"
        tokens, _, said = size.partition("; the limit is ")
        limit = limit or said
        name = entry["file"].rpartition("/")[2]
        named.append(f"`{name}` ({tokens})" if tokens else f"`{name}`")
    where = f"in `{folder}/`" if folder else "at this project's top"
    return _io.bite_line({**entries[0], "bite": (
        f"Files {where} are too big for Read to take whole: {', '.join(named)}"
        + (f"; the limit is {limit}" if limit else "")
        + ". Search them with Grep, or read parts with offset and limit; a sub-agent sent to read one whole meets "
          "the same limit.")})


def _one_environment(fits: list[tuple[dict, str]]) -> list[tuple[dict, str]]:
    """The fits without a fix that activates another environment than the one the project's tools run in now
    (its environment memory, ``"ran"``): BookMinder's "`python` not found" was told both `source venv/bin/activate`
    (a fix from before the project moved to uv) and the environment `.uvenv` in one answer."""
    current = next((e["ran"] for e, _ in fits if isinstance(e.get("ran"), str) and e["ran"]), None)
    if current is None:
        return fits
    return [(e, line) for e, line in fits if e.get("ran") or "/bin/activate" not in str(e.get("fix") or "")
            or current in str(e.get("fix"))]


def _outside(entry: dict, command: str | None, error: str) -> bool:
    """The environment the project runs a program in (an entry with its set-up, ``"ran"``), and this run of it
    was outside that set-up and failed for want of something (``No module named …``, externally managed)."""
    ran = entry.get("ran")
    return isinstance(ran, str) and bool(ran) and ran not in (command or "") and _fail.wants_environment(error)


def _told(entry: dict) -> str | None:
    """One fix as the agent reads it: the date, what fixed it, and the memory's own words when they add to it."""
    line = _io.bite_line(entry)
    fix = entry.get("fix")
    if line is None or "ran" in entry or not isinstance(fix, str) or not fix.strip():
        return line  # the environment the project's tools run in: its own words say it
    date = _io.one_line(str(entry.get("date") or ""), 32)[:10] or "an earlier day"
    bite = _io.one_line(str(entry.get("bite") or ""), _io.MAX_BITE_CHARS)
    fix = _io.one_line(fix, _io.MAX_BITE_CHARS)
    said = "" if fix.lower() in bite.lower() or "what fixed it" in bite.lower() else f" {bite}"
    like = entry.get("like")
    step = max(fix.split("`")[1::2], key=len, default="")
    if said and not like and step and f"run `{step}`" in bite:
        # The memory's words say the step already ("Before `git commit` here, run `pre-commit run …`"): once, and
        # without the checks it names ("its pre-commit hook's `end-of-file-fixer` rewrites files"): the refusal
        # the agent has just read names the ones that failed now, which may be others.
        step_said = bite.partition(": its ")[0].rstrip(".")
        return f"- This failed the same way on {date}: {step_said}. (id: {entry['id']})"
    if isinstance(like, str) and like:  # another program's "not found", fixed by the environment both run in
        return (f"- `{_io.one_line(like, 40)}` was not found the same way on {date}; what fixed it: {fix}.{said} "
                f"(id: {entry['id']})")
    return f"- This failed the same way on {date}; what fixed it: {fix}.{said} (id: {entry['id']})"


def _missed_where(tool_name: str, tool_input: dict, error: str, directory: str, index: str | None, root: str | None,
                  session_id: str) -> list[tuple[str, str]]:
    """Where the file the failed call missed is (``processor/hook_kit/where_files.py``), or the folder of the
    number it guessed: (id, line), [] when the project worked on no such file or folder."""
    _where = _io.kit("where_files")
    missed = _where.missing_path(tool_name, tool_input, error)
    name = _where.file_name(missed) if missed else None
    if missed and name:
        found = _where.where_lines(missed, _io.read_paths(directory, index, name), root, session_id)
        if found:
            return found
    folder = _where.missing_folder(tool_name, tool_input, error)
    if not folder:
        return []
    name = folder.rstrip("/").rpartition("/")[2]
    key = _where.folder_key(name)
    if key is not None:
        return _where.folder_lines(folder, _io.read_paths(directory, index, key), root, session_id)
    key = _where.named_folder_key(name)
    return _where.named_folder_lines(folder, _io.read_paths(directory, index, key), root, session_id) if key else []


def _missed_branch(command: str, error: str, directory: str, index: str | None,
                   session_id: str) -> list[tuple[str, str]]:
    """After a ``git checkout``/``git switch`` of a branch that is not there: the project's branch of that number
    under another name (``processor/hook_kit/branches.py``), or []."""
    lowered = error[:2000].lower()
    if "git" not in command or not any(marker in lowered for marker in _fail.BRANCH_MISSING):
        return []  # most failures: the branch kit is not loaded
    branches = _io.kit("branches")
    missed = branches.missed_branch(command, error)
    key = branches.branch_key(missed) if missed else None
    if missed is None or key is None:
        return []
    return branches.branch_lines(missed, _io.read_paths(directory, index, branches.PREFIX + key), session_id)


def _index_of(directory: str, session_id: str, event: dict) -> tuple[str | None, str | None]:
    """The project's lesson index name and root, from the session's recollection file or the event's cwd."""
    try:
        recollection = _io.load_json_file(f"{directory}/{session_id}.json", _io.RECOLLECTION_LIMIT)
    except OSError:
        recollection = None  # the session's first user message is not processed yet: found from the cwd
    return _io.lessons_index(recollection, event)


def _filed(directory: str, index: str | None, key: str) -> list:
    """What the project's lesson index files under `key` (a failure key): [] when nothing is."""
    filed = _io.read_filed(directory, index, [key])
    return filed[0][1] if filed else []


def main() -> None:
    if _io is not None:
        _io.serve(run)


if __name__ == "__main__":
    main()
