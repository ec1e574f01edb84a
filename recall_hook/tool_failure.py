"""Engram's PostToolUseFailure hook: right after a tool call fails, what fixed the same failure before.

Claude Code runs it after a tool call fails, with the error (``{"session_id", "cwd", "tool_name", "tool_input",
"tool_use_id", "error", "is_interrupt", ...}``); its ``hookSpecificOutput.additionalContext`` reaches the model
beside the failed result. It is the moment with no doubt at all: the agent has just met the failure, and an
earlier session of the project met the same one and got past it.

The failure is known by its call key and signature (``failure_keys.py``: the program, the error lines with
paths, numbers and names masked). The project's lesson index (``processor/recall/lesson_index.py``, named by
the session's recollection file, or found from the event's ``cwd`` before there is one) files each fix under
its failure key with the signature it fixed; the hook reads that one line and tells the fixes whose signature is
this failure's: "This failed the same way on <date>; what fixed it: …". Never a fix learned in this same session
(it is in the agent's context), never one already told in this session (``<session>.shown``, shared with the
PreToolUse hook), never for a call the user declined or interrupted, or the editor's own mechanics.

Registered like the other hooks as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/tool_failure.py``:
stdlib only, no ``re``. It never changes a permission decision and, on any failure of its own, exits 0 saying
nothing.
"""

import sys

if __package__:  # imported as recall_hook.tool_failure (tests, tools)
    from . import failure_keys as _fail
    from . import hook_io as _io
else:  # run through LAUNCHER, or as a script: this file's folder is on sys.path
    _here = __file__.rpartition("/")[0]
    if _here not in sys.path:
        sys.path.insert(0, _here)
    import failure_keys as _fail
    import hook_io as _io

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import tool_failure;tool_failure.main()'
EVENT = "PostToolUseFailure"
MAX_FIXES = 2
_TARGET_KEYS = ("command", "file_path", "notebook_path", "path", "url", "pattern")


def run(stdin: bytes) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    event = _io.loads(stdin.decode("utf-8"))
    if not isinstance(event, dict) or event.get("is_interrupt") is True or _io.env_opt_out() is not None:
        return None
    error, tool_name = event.get("error"), event.get("tool_name")
    if not isinstance(error, str) or not error.strip() or _fail.not_a_failure(tool_name, error):
        return None
    directory = _io.recollections_dir()
    if directory is None:
        return None
    session_id = event.get("session_id")
    if session_id is None:
        session_id = _io.getenv("CLAUDE_SESSION_ID") or _io.newest_session(directory)
    if not _io.valid_session_id(session_id):
        return None
    tool_input = event.get("tool_input") if isinstance(event.get("tool_input"), dict) else {}
    target = next((v for k in _TARGET_KEYS if isinstance(v := tool_input.get(k), str) and v.strip()), None)
    key = _fail.call_key(tool_name, target, error)
    signature = _fail.signature(error)
    if key is None or not signature:
        return None
    entries = _filed(directory, session_id, event, _fail.failure_key(key))
    found = [e for e in entries if isinstance(e, dict) and isinstance(e.get("sig"), list)
             and e.get("session") != session_id and _fail.same_failure([str(s) for s in e["sig"]], signature)]
    lines, ids = [], []
    shown, _ = _io.load_shown(directory, session_id)
    for entry in found:
        line = _told(entry)
        if line is not None and entry["id"] not in shown and entry["id"] not in ids:
            lines.append(line)
            ids.append(entry["id"])
            if len(ids) == MAX_FIXES:
                break
    if not ids or _io.opted_out(directory, session_id):
        return None
    fresh = _io.claim_shown(directory, session_id, ids)  # once per session, whichever hook told it first
    lines = [line for line, i in zip(lines, ids, strict=True) if i in fresh]
    if not lines:
        return None
    body = "\n".join([
        "This failed the same way in an earlier session of this project:",
        *lines,
        f"Call {_io.EXPAND_TOOL}(id) for the full context if it applies. Otherwise, continue your work.",
    ])
    return _io.hook_json(EVENT, _io.fence(body), fresh, directory.rpartition("/")[0])


def _told(entry: dict) -> str | None:
    """One fix as the agent reads it: the date, what fixed it, and the memory's own words when they add to it."""
    line = _io.bite_line(entry)
    fix = entry.get("fix")
    if line is None or not isinstance(fix, str) or not fix.strip():
        return line
    date = _io.one_line(str(entry.get("date") or ""), 32)[:10] or "an earlier day"
    bite = _io.one_line(str(entry.get("bite") or ""), _io.MAX_BITE_CHARS)
    fix = _io.one_line(fix, _io.MAX_BITE_CHARS)
    said = "" if fix.lower() in bite.lower() or "what fixed it" in bite.lower() else f" {bite}"
    return f"- This failed the same way on {date}; what fixed it: {fix}.{said} (id: {entry['id']})"


def _filed(directory: str, session_id: str, event: dict, key: str) -> list:
    """What the project's lesson index files under `key` (a failure key): [] when nothing is."""
    try:
        recollection = _io.load_json_file(f"{directory}/{session_id}.json", _io.RECOLLECTION_LIMIT)
    except OSError:
        recollection = None  # the session's first user message is not processed yet: found from the cwd
    name, _ = _io.lessons_index(recollection, event)
    filed = _io.read_filed(directory, name, [key])
    return filed[0][1] if filed else []


def main() -> None:
    _io.serve(run)


if __name__ == "__main__":
    main()
