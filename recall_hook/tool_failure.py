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

The other agents have no event for a failed call alone, so the failure is read from the call's result:

- the Codex CLI: ``PostToolUse`` of a shell call (matcher ``Bash``; ``tool_failure.py codex``). Its
  ``tool_response`` is the command's output only; whether it failed is in the rollout, which already holds the
  call's ``item_completed`` (``status: "failed"``) and output (``Process exited with code N``) when the hook
  runs: the hook reads the rollout's last ``ROLLOUT_TAIL`` bytes (``transcript_path``) for that call's id;
- the Gemini CLI: ``AfterTool``, which ``pretooluse.py gemini`` already is; a shell command's ``llmContent``
  ends ``Exit Code: N``, and a non-zero one gets the fix beside the lessons (``told_fixes``). A tool that
  errored outright is left alone: Gemini drops that call's hook context.

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
ROLLOUT_TAIL = 256 * 1024  # a Codex rollout's last bytes searched for the call's exit status
_TARGET_KEYS = ("command", "file_path", "notebook_path", "path", "url", "pattern")
_GEMINI_SHELL = "run_shell_command"
_EXIT_CODE = "Exit Code: "


def run(stdin: bytes) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    event = _io.loads(stdin.decode("utf-8"))
    if not isinstance(event, dict) or _io.env_opt_out() is not None:
        return None
    directory = _io.recollections_dir()
    if directory is None:
        return None
    session_id = event.get("session_id")
    if session_id is None:
        session_id = _io.getenv("CLAUDE_SESSION_ID") or _io.newest_session(directory)
    if not _io.valid_session_id(session_id):
        return None
    told = told_fixes(event, directory, session_id)
    if told is None:
        return None
    name = event.get("hook_event_name")
    return _io.hook_json(name if name in ("PostToolUse", "AfterTool") else EVENT, told[1], told[0],
                         directory.rpartition("/")[0])


def told_fixes(event: dict, directory: str, session_id: str) -> tuple[list[str], str] | None:
    """What fixed this failed call's failure in earlier sessions, claimed as told in this session: (the memories'
    ids, the fenced text), or None when the call did not fail or nothing new is known about its failure."""
    failed = failed_call(event)
    if failed is None:
        return None
    tool_name, error = failed
    if not error.strip() or _fail.not_a_failure(tool_name, error):
        return None
    tool_input = event.get("tool_input") if isinstance(event.get("tool_input"), dict) else {}
    target = next((v for k in _TARGET_KEYS if isinstance(v := tool_input.get(k), str) and v.strip()), None)
    key = _fail.call_key(tool_name, target, error)
    signature = _fail.signature(error)
    if key is None or not signature:
        return None
    entries = _filed(directory, session_id, event, _fail.failure_key(key, error))
    lines, ids = [], []
    shown, _ = _io.load_shown(directory, session_id)
    for entry in entries:  # the cheap checks first: most entries under a key are other failures' fixes
        if (not isinstance(entry, dict) or not isinstance(entry.get("sig"), list) or entry.get("session") == session_id
                or entry.get("id") in shown or entry.get("id") in ids
                or not _fail.same_failure([str(s) for s in entry["sig"]], signature)):
            continue
        line = _told(entry)
        if line is not None:
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
        f"Call {_io.tool_name('memory_expand', _io.agent())}(id) for the full context if it applies. Otherwise, "
        "continue your work.",
    ])
    return fresh, _io.fence(body)


def failed_call(event: dict) -> tuple[str, str] | None:
    """(the tool's name as Claude Code says it, the error) when this event reports a failed call, else None."""
    name = event.get("hook_event_name")
    if name == "PostToolUse":  # the Codex CLI: the output is the error when the rollout says the call failed
        output = event.get("tool_response")
        if event.get("tool_name") != "Bash" or not isinstance(output, str):
            return None
        return ("Bash", output) if _codex_failed(event.get("transcript_path"), event.get("tool_use_id")) else None
    if name == "AfterTool":  # the Gemini CLI
        return gemini_failure(event)
    error, tool_name = event.get("error"), event.get("tool_name")
    if event.get("is_interrupt") is True or not isinstance(error, str) or not isinstance(tool_name, str):
        return None
    return tool_name, error


def gemini_failure(event: dict) -> tuple[str, str] | None:
    """A Gemini shell command that exited non-zero: ("Bash", its output). Its ``llmContent`` is
    ``<untrusted_context>\nOutput: …\nExit Code: N\nProcess Group PGID: …</untrusted_context>``."""
    response = event.get("tool_response")
    content = response.get("llmContent") if isinstance(response, dict) else None
    if event.get("tool_name") != _GEMINI_SHELL or not isinstance(content, str) or response.get("error"):
        return None
    head, mark, tail = content.rpartition("\n" + _EXIT_CODE)
    code = tail.split("\n", 1)[0].strip()
    if not mark or not code.lstrip("-").isdigit() or int(code) == 0:
        return None
    output = head.replace("<untrusted_context>", "").strip()
    return "Bash", output[len("Output:"):].strip() if output.startswith("Output:") else output


def _codex_failed(transcript: object, call_id: object) -> bool:
    """Whether the Codex rollout says the call `call_id` failed: its ``item_completed`` event's status, else its
    output's ``Process exited with code N`` header."""
    if not isinstance(transcript, str) or not isinstance(call_id, str) or not call_id:
        return False
    needle = ('"' + call_id + '"').encode()
    for raw in reversed(_io.read_tail(transcript, ROLLOUT_TAIL).split(b"\n")):
        if needle not in raw:
            continue
        try:
            record = _io.loads(raw.decode("utf-8"))
        except ValueError:
            continue  # the tail's cut first line, or a line being written
        payload = record.get("payload") if isinstance(record, dict) else None
        if not isinstance(payload, dict):
            continue
        item = payload.get("item")
        if payload.get("type") == "item_completed" and isinstance(item, dict) and item.get("id") == call_id:
            status = item.get("status")
            if status in ("failed", "completed"):
                return status == "failed"
        if payload.get("type") == "function_call_output" and payload.get("call_id") == call_id:
            output = payload.get("output")
            header = output[:400] if isinstance(output, str) else ""
            for mark in ("Process exited with code ", "Exit code: "):
                if mark in header:
                    code = header.partition(mark)[2].split("\n", 1)[0].strip()
                    return code.lstrip("-").isdigit() and int(code) != 0
    return False


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
