"""Engram's optional prompt hook: memory bites for the prompt before the model sees it.

Registered as Claude Code's, the Codex CLI's, the GitHub Copilot CLI's and Qwen Code's ``UserPromptSubmit`` and as
the Gemini CLI's ``BeforeAgent`` (whose context Gemini appends to the prompt); it answers in the event it was
called for. Qwen runs it before every model request, the later ones of a turn with an empty prompt: those get
nothing, so a prompt's bites are told once.

Off by default. It acts only when the ``prompt_submit_enabled`` setting is true: the environment
variable ``ENGRAM_PROMPT_SUBMIT_ENABLED`` (1/true/yes/on or 0/false/no/off) decides if set, else
the same key in ``$ENGRAM_HOME/config.toml``. A disabled hook exits at once, printing nothing, so
it can stay registered (``engram install --prompt-submit``) and be switched on and off without
touching Claude Code's settings (which running sessions only read at start).

When enabled, within ``prompt_submit_budget_ms`` (default 150 ms; env
``ENGRAM_PROMPT_SUBMIT_BUDGET_MS`` or config.toml) measured from the hook's start:

1. If the processor already wrote this prompt's recollection file (Claude Code writes the prompt's
   transcript line before running this hook, so the processor may win the race), inject that and
   record it as injected in ``<session>.state``, exactly as the PreToolUse hook does, so the first
   tool call does not inject it again. "This prompt's" means: its ``messageUuid`` is the uuid of
   the prompt's line, found in the tail of ``transcript_path``; failing that, it was written less
   than ``FRESH_MS`` before the hook started and has not been injected yet.
2. Else, if a processor is running (its instance lock on ``run/engram.pid`` is held: the token is
   never sent to a port a dead processor left behind), ``POST /recall {query, limit, project}`` to
   ``127.0.0.1:<run/engram.port>`` with ``run/token``, over a raw socket whose every operation
   waits at most what is left of the budget. ``project`` is the git root of the event's ``cwd``,
   computed like ``processor.capture.project.project_root``, and ``"unasked": true``: the processor
   answers with what clears the bar of a user message's bites (``processor/memory/unasked.py``), most
   often nothing, not with memory_recall's ranking.
3. Inject the bites neither shown by this hook earlier in the session, nor by the session's SessionStart
   digest (``<session>.digest``), nor in the session's current (older) recollection file, and list
   their ids in ``<session>.prompt``; the processor's RecollectionWriter leaves those ids out of the
   recollection it writes for the same prompt, so the turn's first tool call does not repeat them.
   (Left: a microsecond race when the writer reads that marker just before the hook writes it and
   replaces its file just after the hook's last look; the cost is one memory shown twice.)

Output: ``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ...}}``
fenced like every Engram injection. Never a ``decision``: a "block" would erase the user's prompt.
Like the PreToolUse hook it imports nothing from Engram or site-packages (the hooks' stdlib
helpers are processor/hook_kit/hook_io.py) and any failure — disabled, no processor, timeout, bad answer,
bad stdin — ends in exit 0 with no output.

Registered as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/prompt_submit.py``.
"""

import sys
import time

if __package__:  # imported as recall_hook.prompt_submit (tests, tools)
    from processor.hook_kit import control as _control
    from processor.hook_kit import hook_io as _io
else:  # run through LAUNCHER: the kit's folder goes on sys.path, its modules imported flat (no package __init__)
    sys.path.insert(0, (__file__.rpartition("/")[0] or ".") + "/../processor/hook_kit")
    try:
        import control as _control
        import hook_io as _io
    except ImportError:  # no kit beside this hook (a moved or half-removed Engram): exit 0, saying nothing
        _io = None

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import prompt_submit;prompt_submit.main()'

ENABLED_ENV = "ENGRAM_PROMPT_SUBMIT_ENABLED"
BUDGET_ENV = "ENGRAM_PROMPT_SUBMIT_BUDGET_MS"
MAX_BUDGET_MS = 2000
TAIL_BYTES = 256 * 1024  # of the transcript, searched for the prompt's own line
TAIL_LINES = 50
FRESH_MS = 1000  # without the prompt's line: a recollection this much younger than the hook is for it
MARKER_IDS = 50
MARKER_LIMIT = 16 * 1024

_OFF_MARKER = "[engram"  # the opt-out markers' common start (processor/capture/optout.py)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- settings: environment first, then config.toml, then the default ----------------------------


def enabled(home: str) -> bool:
    from_env = _io.flag(_io.getenv(ENABLED_ENV))
    if from_env is not None:
        return from_env
    return _io.flag(_io.config_value(home, "prompt_submit_enabled")) is True


def budget_seconds(home: str) -> float:
    raw: object = _io.getenv(BUDGET_ENV)
    if not raw:
        raw = _io.config_value(home, "prompt_submit_budget_ms")
    try:
        ms = int(raw) if raw not in (None, "") else _io.PROMPT_SUBMIT_BUDGET_MS_DEFAULT  # type: ignore[arg-type]
    except (TypeError, ValueError):
        ms = _io.PROMPT_SUBMIT_BUDGET_MS_DEFAULT
    return max(1, min(ms, MAX_BUDGET_MS)) / 1000


def recall_body(prompt: str, project: str | None) -> bytes:
    # "unasked": the bar of a user message's bites (processor/memory/unasked.py), not memory_recall's ranking.
    parts = ['{"query":', _io.quote(prompt[:_control.RECALL_QUERY_CHARS]), ',"limit":',
             str(_io.RECOLLECTION_BITES_DEFAULT), ',"unasked":true']
    if project:
        parts += [',"project":', _io.quote(project)]
    return ("".join(parts) + "}").encode("ascii")


# --- what was shown -----------------------------------------------------------------------------


def shown_ids(directory: str, session_id: str) -> list[str]:
    try:
        marker = _io.load_json_file(f"{directory}/{session_id}{_io.PROMPT_SUFFIX}", MARKER_LIMIT)
    except Exception:
        return []
    ids = marker.get("shown") if isinstance(marker, dict) else None
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def digest_ids(directory: str, session_id: str) -> list[str]:
    """The ids the session's SessionStart digest showed (``<session>.digest``; [] when none or unreadable)."""
    try:
        data = _io.load_json_file(f"{directory}/{session_id}{_io.DIGEST_SUFFIX}", MARKER_LIMIT * 4)
    except Exception:
        return []
    shown = data.get("shown") if isinstance(data, dict) else None
    return [i for i in shown if isinstance(i, str)] if isinstance(shown, list) else []


def write_marker(directory: str, session_id: str, ids: list[str]) -> None:
    """<session>.prompt, atomically: a complete temp file renamed into place."""
    data = ('{"shown":[' + ",".join(_io.quote(i) for i in ids[:MARKER_IDS]) + '],"timestamp":'
            + str(_now_ms()) + "}\n").encode("ascii")
    _io.write_private(directory, f"{session_id}{_io.PROMPT_SUFFIX}", data)


def _output(event: dict, directory: str, lines: list[str], ids: list[str]) -> str:
    """The answer in the event the agent called (Claude Code's and the Codex CLI's UserPromptSubmit, the Gemini
    CLI's BeforeAgent)."""
    return _io.answer(event, _io.PROMPT_EVENTS[0], _io.format_context(lines, _io.agent()), ids,
                          directory.rpartition("/")[0])


def _recollection(directory: str, session_id: str) -> dict | None:
    try:
        recollection = _io.load_json_file(f"{directory}/{session_id}.json", _io.RECOLLECTION_LIMIT)
    except Exception:
        return None
    return recollection if isinstance(recollection, dict) else None


def _text_blocks(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return []


def prompt_line_uuid(transcript_path: object, prompt: str) -> str | None:
    """The uuid of the prompt's own transcript line, if Claude Code has written it (it normally has)."""
    if not isinstance(transcript_path, str) or not transcript_path.startswith("/"):
        return None
    flags = _io.os_api.O_RDONLY | getattr(_io.os_api, "O_NONBLOCK", 0) | getattr(_io.os_api, "O_CLOEXEC", 0)
    try:
        fd = _io.os_api.open(transcript_path, flags)
    except OSError:
        return None
    try:
        st = _io.os_api.fstat(fd)
        if not _io.is_regular(st.st_mode):
            return None
        start = max(0, st.st_size - TAIL_BYTES)
        _io.os_api.lseek(fd, start, 0)
        tail = _io.os_api.read(fd, TAIL_BYTES)
    except OSError:
        return None
    finally:
        _io.os_api.close(fd)
    wanted = prompt.strip()
    lines = tail.split(b"\n")[1 if start else 0:]  # the first line of a cut tail is partial
    for raw in lines[::-1][:TAIL_LINES]:
        if b'"user"' not in raw:
            continue
        try:
            entry = _io.loads(raw.decode("utf-8"))
        except Exception:
            continue
        if not isinstance(entry, dict) or entry.get("type") != "user" or entry.get("isMeta"):
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        uid = entry.get("uuid")
        if isinstance(uid, str) and any(text.strip() == wanted for text in _text_blocks(content)):
            return uid
    return None


def _is_fresh(recollection: dict | None, prompt_uuid: str | None, state_path: str, started_ms: int) -> bool:
    """Written for this prompt: its messageUuid is the prompt's line, or (that line not found) it is
    newer than the hook's start minus FRESH_MS and not injected yet."""
    if not recollection:
        return False
    message_uuid = recollection.get("messageUuid")
    if prompt_uuid is not None:
        return message_uuid == prompt_uuid
    stamp = recollection.get("timestamp")
    return (isinstance(stamp, int) and stamp >= started_ms - FRESH_MS
            and _io.last_injected(state_path) != message_uuid)


def _inject_recollection(event: dict, directory: str, session_id: str, recollection: dict) -> str | None:
    """The processor's own answer for this prompt, claimed so the PreToolUse hook does not repeat it."""
    message_uuid = recollection.get("messageUuid")
    bites = recollection.get("bites")
    if not isinstance(message_uuid, str) or not message_uuid or not isinstance(bites, list):
        return None
    kept = [(line, _io.bite_id(b)) for b in bites[: _io.MAX_BITES] if (line := _io.bite_line(b)) is not None]
    if not kept:
        return None
    # Claimed like the PreToolUse hook's: once a message, and each memory once a session, by any hook.
    fresh = _io.claim_shown(directory, session_id, [], asked=[i for _, i in kept], message=message_uuid)
    kept = [(line, bite_id) for line, bite_id in kept if bite_id in fresh]
    if not kept:
        return None
    return _output(event, directory, [line for line, _ in kept], [bite_id for _, bite_id in kept])


def _bite_ids(recollection: dict | None) -> list[str]:
    bites = recollection.get("bites") if recollection else None
    if not isinstance(bites, list):
        return []
    return [b["id"] for b in bites if isinstance(b, dict) and isinstance(b.get("id"), str)]


def run(stdin: bytes, started_ms: int | None = None, started: float | None = None) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    started_ms = _now_ms() if started_ms is None else started_ms
    started = time.monotonic() if started is None else started
    event = _io.loads(stdin.decode("utf-8"))
    if not isinstance(event, dict):
        return None
    directory = _io.recollections_dir()
    if directory is None:
        return None
    home = directory.rpartition("/")[0]
    if not enabled(home):
        return None
    session_id = event.get("session_id")
    prompt = event.get("prompt")
    cwd = event.get("cwd")
    if not _io.valid_session_id(session_id) or not isinstance(prompt, str) or not prompt.strip():
        return None
    if _io.opted_out(directory, session_id) or _OFF_MARKER in prompt.lower():
        # Opted out ($ENGRAM_OFF, <session>.off); a prompt that may carry the marker itself gets nothing
        # either: the processor judges it (processor/capture/optout.py) once the line is captured.
        return None
    deadline = started + budget_seconds(home)
    prompt_uuid = prompt_line_uuid(event.get("transcript_path"), prompt)
    state_path = f"{directory}/{session_id}.state"

    # The processor's recollection for this prompt, if already written, is the better answer (topic
    # gate, same-session exclusions, the bar), even when it says there is nothing to show.
    recollection = _recollection(directory, session_id)
    if _is_fresh(recollection, prompt_uuid, state_path, started_ms):
        return _inject_recollection(event, directory, session_id, recollection)  # type: ignore[arg-type]
    endpoint = _control.endpoint(home + "/run")
    if endpoint is None:
        return None
    project = _project_root(cwd) if isinstance(cwd, str) and cwd else None
    try:
        answer = _control.post_recall(*endpoint, recall_body(prompt, project), deadline)
    except OSError:  # refused, reset, or out of budget (TimeoutError)
        answer = None
    latest = _recollection(directory, session_id)  # it may have been written while /recall ran
    if _is_fresh(latest, prompt_uuid, state_path, started_ms):
        return _inject_recollection(event, directory, session_id, latest)  # type: ignore[arg-type]
    bites = answer.get("bites") if isinstance(answer, dict) else None
    if not isinstance(bites, list):
        return None
    shown = shown_ids(directory, session_id)
    # Left out: what this hook showed earlier in the session, what the session's SessionStart digest showed
    # (the recollection writer leaves those out too; /recall does not know the session's digest), and the
    # current recollection's bites (already injected, or about to be by the PreToolUse hook when the topic
    # gate kept that file).
    skip = set(shown) | set(digest_ids(directory, session_id)) | set(_bite_ids(latest))
    lines: list[str] = []
    new_ids: list[str] = []
    for bite in bites:
        if not isinstance(bite, dict) or bite.get("id") in skip:
            continue
        line = _io.bite_line(bite)
        if line is not None:
            lines.append(line)
            new_ids.append(bite["id"])
            skip.add(bite["id"])
        if len(lines) == _io.RECOLLECTION_BITES_DEFAULT:
            break
    if not lines:
        return None
    write_marker(directory, session_id, new_ids + shown)
    return _output(event, directory, lines, new_ids)


def _project_root(cwd: str) -> str:
    """The git root of the cwd, as the processor computes it (the kit's ``project``, loaded only here)."""
    if __package__:
        from processor.hook_kit.project import project_root
    else:
        from project import project_root
    return project_root(cwd)


def main() -> None:
    if _io is None:
        return
    started_ms, started = _now_ms(), time.monotonic()
    _io.serve(lambda stdin: run(stdin, started_ms, started))


if __name__ == "__main__":
    main()
