"""Engram's tool-call hook: inject this session's precomputed memory bites, once per user message.

Registered as Claude Code's and the Codex CLI's ``PreToolUse`` (their shapes are the same), as the Gemini
CLI's ``AfterTool``: Gemini drops a ``BeforeTool`` hook's context, and delivers an ``AfterTool`` one with the
call's result, before the model's next step — the nearest moment it has —, and for the same reason as the GitHub
Copilot CLI's and Qwen Code's ``PostToolUse`` and ``PostToolUseFailure`` (Copilot delivers a ``PreToolUse``
context only after the call's result, Qwen drops it), opencode's plugin runs it after each call that returned
(``tool.execute.after``) and pi's extension after each call (``tool_result``): neither lets anything reach the
model before a call. The registered command names its agent after the script (``… pretooluse.py gemini``); what
differs per agent is the kit's business (``processor/hook_kit/hook_io.py``, each agent's events).

Claude Code runs this before every tool call, so its whole-process time is its cost. It is
registered as ``<real python> -I -S -c LAUNCHER /abs/path/recall_hook/pretooluse.py`` (it also
runs as a plain script: ``python -I -S /abs/path/recall_hook/pretooluse.py``) and:

- is imported rather than run as a script, so Python loads its cached bytecode: compiling this
  file afresh on every tool call costs ~3 ms, a quarter of the interpreter's whole start-up;
- imports nothing from site-packages and, of Engram, only the hooks' stdlib kit (``processor/hook_kit/``,
  imported flat from its folder: no package ``__init__``), which avoids even ``os`` and ``json`` (``json``
  pulls in ``re``/``enum``, which alone doubles interpreter start-up): it uses the built-in ``posix``
  module and the ``_json`` C accelerator, with plain ``os``/``json`` as a fallback;
- does only file reads and, once per user message, one small atomic write.

Input: the PreToolUse event JSON on stdin. The session is ``session_id`` from that JSON, else
``$CLAUDE_SESSION_ID``, else the newest recollection file. The processor writes
``$ENGRAM_HOME/recollections/<session_id>.json``::

    {"messageUuid": str, "timestamp": ms, "bites": [{"id", "bite", "date", "importance"}]}

The hook injects it once per ``messageUuid`` (remembered in ``<session_id>.state``), and, on every call that
works on a file or runs a command, what earlier sessions left about that file or command: the project's
lesson index named by the recollection (``lessons/<project>.index``, ``processor/recall/lesson_index.py``),
looked up by the call's keys (``hook_kit/tool_keys.py``), at most MAX_CALL_BITES memories, each once per session
(``<session_id>.shown``), none learned in this same session, nothing about a file the agent is creating
or created, no fix the call already applies (its ``uses``), a rule's guard only before a call of the form
the rule forbids (its ``when``), and a branch's commits no session pushed before a ``git pull`` into it
(``pull:<branch>``). All of it goes out as
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": ...}, "systemMessage":
"Engram: 2 memories — ep_…, ep_…"}`` (the line the user sees; off with the ``show_injected``
setting, which costs a config.toml read only when the environment does not decide) and never
as a ``permissionDecision``: an "allow" would silently approve every tool call.

After a call that failed, where the answer comes after the call (a Gemini shell command that exited non-zero, a
Copilot one — a successful call to Copilot —, any call at Copilot's and Qwen's ``PostToolUseFailure``, an opencode
shell command that exited non-zero, a pi call marked ``isError``), the same answer also carries what fixed the same
failure in an earlier session (``tool_failure.py``).

A session that opted out (``$ENGRAM_OFF`` in Claude Code's environment, or ``<session_id>.off`` written
by the processor after an ``[engram off]`` prompt) gets nothing.

Every failure (bad stdin, missing/corrupt/huge file, unreadable directory, no kit beside the hook) ends in
exit 0 with no output: memory is a nicety, a broken tool call is not.
"""

import sys

if __package__:  # imported as recall_hook.pretooluse (tests, tools)
    from processor.hook_kit import hook_io as _io
    from processor.hook_kit import tool_keys as _keys
else:  # run through LAUNCHER: the kit's folder goes on sys.path, its modules imported flat (no package __init__)
    sys.path.insert(0, (__file__.rpartition("/")[0] or ".") + "/../processor/hook_kit")
    try:
        import hook_io as _io
        import tool_keys as _keys
    except ImportError:  # no kit beside this hook (a moved or half-removed Engram): exit 0, saying nothing
        _io = None

LAUNCHER = 'import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import pretooluse;pretooluse.main()'
MAX_CALL_BITES = 2  # memories told about one tool call, at most
# What a git command that makes a branch says (``checkout -b``, ``switch -c``, ``branch NAME``, ``worktree add -b``).
_MAKES_BRANCH = (" -b ", " -B ", " -c ", " -C ", "--create ", "branch ")


def run(stdin: bytes) -> str | None:
    """The hook's stdout for this stdin (None: print nothing). Raises on any bad input."""
    begun = _io.event_of(stdin)
    if begun is None:
        return None
    event, directory, session_id = begun
    try:
        recollection = _io.load_json_file(f"{directory}/{session_id}.json", _io.RECOLLECTION_LIMIT)
    except OSError:
        recollection = None  # before the processor wrote one: no bites yet, the lesson index from the cwd
    if recollection is not None and not isinstance(recollection, dict):
        return None
    lines, ids, message_uuid = _message_bites(directory, session_id, recollection or {})
    about = _call_bites(directory, session_id, recollection, event, ids)
    after = _io.after_call(event)
    fixes = _failure_fixes(event, directory, session_id) if after else None
    branches = [] if after else _branches_made(directory, session_id, recollection, event)
    home = directory.rpartition("/")[0]
    if not lines and not about and not branches:
        return None if fixes is None else _io.answer(event, _io.PRE_TOOL, fixes[1], fixes[0], home)
    # The session opted out by a marker in a prompt: the processor wrote <session>.off (one stat, only
    # when about to inject; a recollection written just before the opt-out must not slip through).
    if _io.opted_out(directory, session_id):
        return None
    # Told once a session, by whichever hook first: a message's bites and what is told about the call alike
    # (and a message's bites once: a parallel tool call's hook may have injected them).
    fresh = _io.claim_shown(directory, session_id, [i for i, _ in about + branches], asked=ids,
                            message=message_uuid if lines else None) if about or ids or branches else []
    lines = [line for line, i in zip(lines, ids, strict=True) if i in fresh]
    ids = [i for i in ids if i in fresh]
    about = [(i, line) for i, line in about if i in fresh]
    branches = [(i, line) for i, line in branches if i in fresh]
    if not lines and not about and not branches and fixes is None:
        return None
    agent = _io.agent()
    parts = [_io.format_context(lines, agent)] if lines else []
    if about:
        parts.append(_io.format_call_context(_target(event), [line for _, line in about], agent, after=after))
    if branches:
        parts.append(_io.format_branch_context([line for _, line in branches], agent))
    told = ids + [i for i, _ in about]  # what the processor records as told: memories, not the project's branches
    if fixes is not None:
        parts.append(fixes[1])
        told += fixes[0]
    return _io.answer(event, _io.PRE_TOOL, "\n".join(parts), told, home)


def _failure_fixes(event: dict, directory: str, session_id: str) -> tuple[list[str], str] | None:
    """After a call the agent reads the answer only after (Gemini's AfterTool, Copilot's and Qwen's PostToolUse and
    PostToolUseFailure, opencode's tool.execute.after, pi's tool_result), when it failed: what fixed the same
    failure before (``tool_failure.py``, imported only then)."""
    if not _io.may_have_failed(event):
        return None
    if __package__:
        from . import tool_failure
    else:  # this hook's folder: on sys.path through LAUNCHER, not when run as a script (-I leaves it off)
        sys.path.insert(1, __file__.rpartition("/")[0] or ".")
        import tool_failure
    return tool_failure.told_fixes(event, directory, session_id)


def _branches_made(directory: str, session_id: str, recollection: dict | None, event: dict) -> list[tuple[str, str]]:
    """Before a shell call that makes a git branch: the project's branch of its number under another name, which an
    earlier session worked on (``processor/hook_kit/branches.py``): (id, line), [] for every other call."""
    call = _io.call_of(event)
    command = _io.command_of(call[1]) if call is not None and call[0] == "Bash" else None
    if not command or "git" not in command or not any(mark in command for mark in _MAKES_BRANCH):
        return []  # most git commands make no branch: the branch kit is not loaded
    branches = _io.kit("branches")
    made = branches.made_branches(command)
    if not made:
        return []
    name, _ = _io.lessons_index(recollection, event)
    shown, _ = _io.load_shown(directory, session_id)
    found: list[tuple[str, str]] = []
    for branch in made:
        key = branches.branch_key(branch)
        if key is not None:
            entries = _io.read_paths(directory, name, branches.PREFIX + key)
            found += [f for f in branches.branch_lines(branch, entries, session_id) if f[0] not in shown]
    return found


def _message_bites(directory: str, session_id: str, recollection: dict) -> tuple[list[str], list[str], str]:
    """The bites of the session's newest user message, unless already injected: (lines, ids, its uuid)."""
    message_uuid = recollection.get("messageUuid")
    bites = recollection.get("bites")
    if not isinstance(message_uuid, str) or not message_uuid or not isinstance(bites, list) or not bites:
        return [], [], ""
    # Cheap check first, without the lock: most tool calls of a message end here.
    if _io.last_injected(f"{directory}/{session_id}{_io.STATE_SUFFIX}") == message_uuid:
        return [], [], ""
    lines = []
    ids = []
    for bite in bites:
        line = _io.bite_line(bite)
        if line is not None:
            lines.append(line)
            ids.append(bite["id"])  # bite_line checked it
            if len(lines) == _io.MAX_BITES:
                break
    return lines, ids, message_uuid


def _call_bites(directory: str, session_id: str, recollection: dict | None, event: dict,
                exclude: list[str]) -> list[tuple[str, str]]:
    """What earlier sessions left about the file or command this call works on: (id, line), at most
    MAX_CALL_BITES, each memory once per session, nothing about a file the agent itself created."""
    call = _io.call_of(event)
    if call is None:
        return []
    tool_name, tool_input = call
    name, root = _io.lessons_index(recollection, event)
    keys = _keys.tool_keys(tool_name, tool_input, root)
    command = _io.command_of(tool_input) if tool_name == "Bash" else None
    # A program the project runs inside an environment, run bare: its environment, before the failure.
    keys += ["fail:" + program for program in _keys.bare_programs(command, root)] if command else []
    if command and "git pull" in command:  # a branch's commits no session pushed: before a pull into it
        keys += _io.kit("branches").pull_keys(command, _branch_of(event, recollection))
    if not keys:
        return []
    # One line per key (processor/recall/lesson_index.py): find the call's keys' lines, parse only those.
    filed = _io.read_filed(directory, name, keys)
    if not filed:
        return []
    shown, created = _io.load_shown(directory, session_id)
    if keys[0].startswith("file:") and _io.creating(event, tool_name, tool_input):
        _io.claim_shown(directory, session_id, [], created=keys[0])  # a new file: nobody left anything on it
        filed = [(key, entries) for key, entries in filed if key.startswith("kind:")]  # but on files of its kind
        if not filed:
            return []
    found: list[tuple[str, str]] = []
    words = _applied_words(tool_input)
    # A file the agent made itself: nothing earlier sessions left about it, its folder or its name applies.
    own = keys[0] in created
    for key, entries in filed:
        if key in created or (own and key.startswith(("file:", "dir:", "name:"))):
            continue
        for entry in entries:
            bite_id = entry.get("id") if isinstance(entry, dict) else None
            if isinstance(bite_id, str) and entry.get("marks") is True:
                _io.claim_shown(directory, session_id, [], created=_io.KNOWN_PREFIX + bite_id)
                continue  # the call runs the step a lesson says to run first: the session knows it, and is not told
            if (not isinstance(bite_id, str) or bite_id in shown or bite_id in exclude
                    or entry.get("session") == session_id or any(bite_id == i for i, _ in found)
                    or _io.KNOWN_PREFIX + bite_id in created):
                continue  # told already, learned in this very session, or known there: it has it in its context
            if key.startswith("fail:") and entry.get("before") is not True and (
                    not isinstance(entry.get("ran"), str) or _io.set_up_gone(entry, root)
                    or _io.set_up_active(entry, root)):
                continue  # under a failure, only the environment its program runs in, or a program the user said
                # is not here (a fix waits for the failure)
            uses = entry.get("uses")
            if isinstance(uses, list) and uses and sum(u in words for u in uses) * 2 >= len(uses):
                continue  # the call already does what fixed it: nothing to tell
            when = entry.get("when")
            if isinstance(when, list) and when and not all(w in words for w in when):
                continue  # a rule's guard: this call does not have the form the rule forbids
            if entry.get("bypass") is True and _keys.hook_bypass(_io.command_of(tool_input) or "") is None:
                continue  # the user declined skipping the hooks: told before a call that would, not every commit
            if isinstance(entry.get("core"), str) and not _runs_without(tool_input, entry["core"], entry.get("vars")):
                continue  # the variables a command came to be run with: told before a run of it without them
            asked = entry.get("asked")
            if isinstance(asked, list) and asked and not any(option in asked for option in _options(tool_input, key)):
                continue  # a test run that ran nothing when asked with these options: this call has none of them
            on = entry.get("on")
            if isinstance(on, list) and tool_name not in on:
                continue  # told before these tools only (how a file is to be edited: not at a read of it)
            branch = entry.get("branch")
            if isinstance(branch, list) and _branch_of(event, recollection) not in branch:
                continue  # a rule that keeps commits off a branch: told while the checkout is on it
            until = entry.get("until")
            if isinstance(until, int) and not _starts_again(command, entry.get("runs"), until):
                continue  # what a session left running: before a call that starts it again, while it may run
            if "starts" in entry and not _runs_one(command, entry["starts"]):
                continue  # a local override a session left: before a call that starts what reads it
            given = entry.get("unless")
            if isinstance(given, list) and isinstance(tool_input, dict) and any(k in tool_input for k in given):
                continue  # the call already does what it says (a Read given a `limit` reads a part of the file)
            line = _io.bite_line(entry)
            if line is not None:
                found.append((bite_id, line))
                if len(found) == MAX_CALL_BITES:
                    return found
    return found


def _starts_again(command: str | None, runs: object, until: int) -> bool:
    """Whether the call starts one of `runs` (what a session left running) again, not stopping what runs first
    (``kill $(lsof -ti:3000); pnpm dev &``), while it may still run (its session's last call is under a few hours
    old: `until`)."""
    import time  # built in: loaded only for such an entry

    if not command or time.time() * 1000 > until or _keys.kills(command):
        return False
    return _runs_one(command, runs)


def _runs_one(command: str | None, runs: object) -> bool:
    """Whether the shell command runs one of `runs` (``pnpm --filter web dev``), its variables and redirections
    aside."""
    if not command or not isinstance(runs, list):
        return False
    return any(_keys.assigned(segment)[1] in runs for segment in _keys.simple_commands(command))


def _branch_of(event: dict, recollection: dict | None) -> str | None:
    """The branch the call runs on: its checkout's (the event's folder, on this machine), else the one the session's
    newest transcript line named (the processor keeps it in the recollection file)."""
    branch = _io.checkout_branch(event.get("cwd"))
    if branch is None and isinstance(recollection, dict) and isinstance(recollection.get("branch"), str):
        branch = recollection["branch"]
    return branch


def _options(tool_input: object, key: str) -> set[str]:
    """The options by name, as written (``--testPathPattern='x'`` → ``--testPathPattern``), of the commands of the
    call's chain that `key` files (``cmd:uv venv``): a `mkdir -p` earlier in the chain gives `uv venv` no `-p`."""
    command = _io.command_of(tool_input)
    if command is None:
        return set()
    segments = [seg for seg in _keys.simple_commands(command) if _keys.command_key(seg) == key]
    return {w.partition("=")[0].strip("'\"") for seg in segments for w in seg.split()
            if w.startswith(("-", "'-", '"-'))}


def _runs_without(tool_input: object, core: str, names: object) -> bool:
    """Whether the call runs `core` (``pnpm --filter api dev``) setting none of the variables `names`."""
    command = _io.command_of(tool_input)
    if command is None or not isinstance(names, list):
        return False
    for segment in _keys.simple_commands(command):
        given, run = _keys.assigned(segment)
        if run == core and not any(name in given for name in names):
            return True
    return False


def _applied_words(tool_input: object) -> set[str]:
    """A command's words as a fix's added words are compared with (a path by its last part)."""
    command = _io.command_of(tool_input)
    if command is None:
        return set()
    return {w.rstrip("/").rpartition("/")[2] for w in command[:2000].split()}


def _target(event: dict) -> str:
    tool_input = event.get("tool_input") if isinstance(event.get("tool_input"), dict) else {}
    for key in ("file_path", "notebook_path", "command", "path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return _io.one_line(value, 80)
    return str(event.get("tool_name") or "this call")


def main() -> None:
    if _io is not None:
        _io.serve(run)


if __name__ == "__main__":
    main()
