"""Engram's SessionStart hook: print the digest of what Engram remembers for this session's project.

Claude Code runs it on every start, resume, clear and compact, so its whole-process time is a
delay before the session starts. The Codex CLI, the Gemini CLI, the GitHub Copilot CLI and Qwen Code run it as
their own SessionStart hook (the same input and output shape); the registered command names the agent after the
script (``… gemini``), so the digest names Engram's tools as that agent shows them. Registered like the other
hooks as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/session_start.py``: no site-packages, no apsw, no
processor.config;
the digest (``processor.recall.digest``) reads the database with stdlib ``sqlite3``, read-only, and
the settings it needs (``$ENGRAM_HOME``, config.toml) through the hooks' kit (``processor/hook_kit/``).
The launcher puts the folder holding ``recall_hook`` and ``processor`` on ``sys.path`` (the repository of an editable
install, site-packages of a wheel). It also runs as ``python -I -m recall_hook.session_start``
(earlier registrations, tests).

Input: the event JSON on stdin (``{"session_id", "transcript_path", "cwd", "hook_event_name",
"source", ...}``). Output: ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
"additionalContext": ...}, "systemMessage": "Engram: N memories — …"}``; the ids shown are
recorded in ``recollections/<session>.digest`` so the session's bites do not repeat them.

Failure: a missing database, a locked one, an unreadable stdin, a bad config — anything — ends in
exit 0 with nothing on stdout; unexpected errors leave one line on stderr, never a traceback: the
session must start regardless.
"""

import sys

if not __package__:  # run through LAUNCHER: the package root goes on sys.path (see the docstring)
    _root = __file__.rpartition("/")[0].rpartition("/")[0]
    if _root not in sys.path:
        sys.path.insert(0, _root)

from processor.hook_kit.hook_io import STDIN_LIMIT, agent, loads  # noqa: E402 - after the path set-up above

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import session_start;session_start.main()'


def main() -> int:
    try:
        raw = sys.stdin.buffer.read(STDIN_LIMIT + 1)
        if len(raw) > STDIN_LIMIT:
            return 0
        from processor.recall.digest import hook_output
        from processor.store.digest import ERRORS

        try:
            output = hook_output(loads(raw.decode("utf-8")), agent=agent())
        except (ValueError, StopIteration, *ERRORS):
            return 0  # bad stdin, locked/slow/old/missing database: start the session without a digest
        if output:
            sys.stdout.write(output + "\n")
            sys.stdout.flush()
    except Exception as exc:
        print(f"engram session_start: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
