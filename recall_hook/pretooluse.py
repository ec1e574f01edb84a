"""Engram's PreToolUse hook: inject this session's precomputed memory bites, once per user message.

Claude Code runs this before every tool call, so its whole-process time is its cost. It is
registered as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/pretooluse.py`` (it also
runs as a plain script: ``python -I -S /abs/path/recall_hook/pretooluse.py``) and:

- is imported rather than run as a script, so Python loads its cached bytecode: compiling this
  file afresh on every tool call costs ~3 ms, a quarter of the interpreter's whole start-up;
- imports nothing from Engram or site-packages, and avoids even ``os`` and ``json`` (``json``
  pulls in ``re``/``enum``, which alone doubles interpreter start-up): it uses the built-in
  ``posix`` module and the ``_json`` C accelerator, with plain ``os``/``json`` as a fallback;
- does only file reads and, once per user message, one small atomic write.

Input: the PreToolUse event JSON on stdin. The session is ``session_id`` from that JSON, else
``$CLAUDE_SESSION_ID``, else the newest recollection file. The processor writes
``$ENGRAM_HOME/recollections/<session_id>.json``::

    {"messageUuid": str, "timestamp": ms, "bites": [{"id", "bite", "date", "importance"}]}

The hook injects it once per ``messageUuid`` (remembered in ``<session_id>.state``) as
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": ...}, "systemMessage":
"Engram: 2 memories — ep_…, ep_…"}`` (the line the user sees; off with the ``show_injected``
setting, which costs a config.toml read only when the environment does not decide) and never
as a ``permissionDecision``: an "allow" would silently approve every tool call.

A session that opted out (``$ENGRAM_OFF`` in Claude Code's environment, or ``<session_id>.off`` written
by the processor after an ``[engram off]`` prompt) gets nothing.

Every failure (bad stdin, missing/corrupt/huge file, unreadable directory) ends in exit 0 with
no output: memory is a nicety, a broken tool call is not.
"""

import sys

if __package__:  # imported as recall_hook.pretooluse (tests, tools)
    from . import hook_io as _io
else:  # run through LAUNCHER, or as a script: this file's folder is on sys.path
    _here = __file__.rpartition("/")[0]
    if _here not in sys.path:
        sys.path.insert(0, _here)
    import hook_io as _io

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import pretooluse;pretooluse.main()'

def run(stdin: bytes) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    event = _io.loads(stdin.decode("utf-8"))
    if not isinstance(event, dict):
        return None
    if _io.env_opt_out() is not None:
        return None  # Claude Code was started with ENGRAM_OFF: no memory in its sessions
    directory = _io.recollections_dir()
    if directory is None:
        return None

    session_id = event.get("session_id")
    if session_id is None:
        session_id = _io.getenv("CLAUDE_SESSION_ID") or _io.newest_session(directory)
    if not _io.valid_session_id(session_id):
        return None

    recollection = _io.load_json_file(f"{directory}/{session_id}.json", _io.RECOLLECTION_LIMIT)
    if not isinstance(recollection, dict):
        return None
    message_uuid = recollection.get("messageUuid")
    bites = recollection.get("bites")
    if not isinstance(message_uuid, str) or not message_uuid or not isinstance(bites, list):
        return None

    # Cheap check first, without the lock: most tool calls of a message end here.
    if _io.last_injected(f"{directory}/{session_id}.state") == message_uuid:
        return None

    lines = []
    ids = []
    for bite in bites:
        line = _io.bite_line(bite)
        if line is not None:
            lines.append(line)
            ids.append(bite["id"])  # bite_line checked it
            if len(lines) == _io.MAX_BITES:
                break
    if not lines:
        # Nothing to say; state is left alone, so a rewrite of this message's file still counts.
        return None

    # The session opted out by a marker in a prompt: the processor wrote <session>.off (one stat, only
    # when about to inject; a recollection written just before the opt-out must not slip through).
    if _io.opted_out(directory, session_id) or not _io.claim(directory, session_id, message_uuid):
        return None
    return _io.hook_json("PreToolUse", _io.format_context(lines), ids, directory.rpartition("/")[0])


def main() -> None:
    _io.serve(run)


if __name__ == "__main__":
    main()
