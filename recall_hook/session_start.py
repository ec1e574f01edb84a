"""Engram's SessionStart hook: print the digest of what Engram remembers for this session's project.

Claude Code runs ``<engram python> -I -m recall_hook.session_start`` with the event JSON on stdin
(``{"session_id", "transcript_path", "cwd", "hook_event_name", "source", ...}``); the digest itself
is ``processor.recall.digest``. Failure: a missing database, a locked one, an unreadable stdin, a
bad config — anything — ends in exit 0 with nothing on stdout; unexpected errors leave one line on
stderr, never a traceback: the session must start regardless.
"""

import sys

try:
    from recall_hook.hook_io import STDIN_LIMIT
except ImportError:  # run from this folder as a script
    from hook_io import STDIN_LIMIT


def main() -> int:
    try:
        raw = sys.stdin.buffer.read(STDIN_LIMIT + 1)
        if len(raw) > STDIN_LIMIT:
            return 0
        import json

        import apsw

        from processor.recall.digest import hook_output

        try:
            output = hook_output(json.loads(raw))
        except (ValueError, apsw.BusyError, apsw.InterruptError, apsw.SQLError, apsw.CantOpenError, OSError):
            return 0  # bad stdin, locked/slow/old/missing database: start the session without a digest
        if output:
            sys.stdout.write(output + "\n")
            sys.stdout.flush()
    except Exception as exc:
        print(f"engram session_start: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
