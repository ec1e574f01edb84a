"""What capture makes of a transcript line, whichever agent wrote it: the outcome types, the helpers all share.

Each agent's format (``claude``, ``codex``, ``gemini``) reads its own lines into these objects: a line of
conversation text (``CapturedLine``: the message row the store keeps, with the tool calls, results and failures
read beside it), a line that carries only results of awaited tool uses (``ToolResultsOnly``), or a line not
captured (``Skipped``). The helpers keep what the formats capture alike: injected spans cut before anything is
stored, times as epoch milliseconds, what a tool call works on, and the head and tail of a failed call's output,
every text redacted (``processor.redaction``) before it reaches the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from processor.capture import signals
from processor.hook_kit.hook_io import FENCES
from processor.redaction import Redacted, redact
from processor.store.sessions import MessageLine


@dataclass(frozen=True, kw_only=True)
class CapturedLine(MessageLine):
    """One transcript line that carries conversation text: its message row (``MessageLine``), and what else the
    line said that capture acts on."""

    session_id: str | None
    # Claude Code marks the last assistant line of a finished turn with stop_reason "end_turn" (a tool
    # call's line says "tool_use"): the round is complete without waiting for the next user message.
    end_turn: bool = False
    tool_uses: tuple[tuple[str, signals.PendingSignal], ...] = ()  # (tool_use_id, what it would mean)
    tool_results: tuple[ToolResult, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()  # every tool use of an assistant line: what it worked on
    failures: tuple[ToolFailure, ...] = ()  # the failed tool results a user line carries


@dataclass(frozen=True)
class ToolCall:
    """A tool use: its tool and what it works on (a file path, a shell command, a search), redacted."""

    tool_use_id: str
    name: str
    target: Redacted | None


@dataclass(frozen=True)
class ToolFailure:
    """A tool result marked ``is_error``: the head and tail of its output, redacted (never the whole of it)."""

    tool_use_id: str
    text: Redacted


@dataclass(frozen=True)
class ToolResult:
    """The result of an awaited high-signal tool_use (its text redacted)."""

    tool_use_id: str
    is_error: bool
    text: Redacted


@dataclass(frozen=True)
class ToolResultsOnly:
    """A line with no conversation text that carries results of awaited tool uses."""

    uuid: str
    session_id: str | None
    ts_ms: int | None
    tool_results: tuple[ToolResult, ...]
    failures: tuple[ToolFailure, ...] = ()


@dataclass(frozen=True)
class Skipped:
    """A line that is not captured. `problem` is set when the line is malformed (worth a log line)."""

    reason: str
    problem: bool = False


_SPAN_PATTERNS = (
    re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL),
    re.compile(r"<private>.*?(?:</private>|\Z)", re.DOTALL),
    # Engram's fence in each form it takes (Gemini's has no angle brackets): see hook_io.FENCES.
    *(re.compile(re.escape(opener) + r".*?(?:" + re.escape(closer) + r"|\Z)", re.DOTALL) for opener, closer in FENCES),
)
_SPAN_OPENERS = ("<system-reminder>", "<private>", *(opener for opener, _ in FENCES))


def strip_injected_spans(text: str) -> str:
    """The text without system reminders, ``<private>`` spans and anything Engram injected (its fence)."""
    # Cheap substring test first: most messages contain none of the markers.
    if any(opener in text for opener in _SPAN_OPENERS):
        for pattern in _SPAN_PATTERNS:
            text = pattern.sub("", text)
    return text


def timestamp_ms(value: str | None) -> int | None:
    """An ISO-8601 time (``Z`` or an offset) as epoch milliseconds; None when absent or unreadable."""
    if not value:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


@lru_cache(maxsize=256)
def redact_repeated(value: str) -> Redacted:
    """Short text that lines repeat (a cwd, a git branch, a tool call's note), redacted: each is scanned once
    (redaction is a pure function of the text while the process runs)."""
    return redact(value)


# A tool call's target, as stored: a command longer than this is cut (its head names the program and files).
TARGET_CHARS = 500
# Of a failed result's output: its head (the command's first complaint) and tail (the summary line, the exit
# code), never the whole of it (a failing build can print megabytes).
FAILURE_HEAD_CHARS = 1_200
FAILURE_TAIL_CHARS = 400
_REDACT_MARGIN = 2_000  # read past each cut before redacting, so a secret that straddles it is still whole
# The last two: the background task a TaskStop or KillShell ends (memory/left_running.py).
_TARGET_KEYS = ("file_path", "notebook_path", "command", "path", "pattern", "url", "query", "task_id", "shell_id")
# The agent's own todo list, under Claude Code's name and shape: each agent's format maps its tool to it (the
# Codex CLI's update_plan, the Gemini CLI's write_todos), so where a session stopped reads alike for every agent.
TODO_TOOL = "TodoWrite"
TODO_CHARS = 1_500  # a todo list, as stored: its items, one a line, cut past this
TODO_STATUSES = ("pending", "in_progress", "completed", "cancelled")


def todos_input(items: object, text_key: str) -> dict:
    """A todo list as Claude Code's TodoWrite input (``{"todos": [{"content", "status"}]}``), from another agent's
    items (``text_key``: the key holding each item's words); items without words are left out."""
    todos = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get(text_key), str) and item[text_key].strip():
            status = item.get("status")
            todos.append({"content": item[text_key], "status": status if status in TODO_STATUSES else "pending"})
    return {"todos": todos}


def todo_text(tool_input: dict) -> str | None:
    """A todo list as stored: one ``status: content`` line an item, in the agent's order."""
    items = tool_input.get("todos")
    if not isinstance(items, list):
        return None
    lines = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("content"), str) and item["content"].strip():
            status = item.get("status") if item.get("status") in TODO_STATUSES else "pending"
            lines.append(f"{status}: {' '.join(item['content'].split())}")
    return "\n".join(lines) if lines else None


def tool_target(tool_input: object) -> Redacted | None:
    """What a tool call works on (a file path, a command, a search; a todo list's items), redacted and cut to
    TARGET_CHARS (a todo list to TODO_CHARS)."""
    if not isinstance(tool_input, dict):
        return None
    todos = todo_text(tool_input)
    if todos is not None:
        return redact(redact(todos[:TODO_CHARS + _REDACT_MARGIN])[:TODO_CHARS])
    for key in _TARGET_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            if len(value) <= TARGET_CHARS:
                return redact(value)
            # Redacted past the cut, cut, then redacted again: a cut can leave a token that its context had kept
            # from matching (characters glued before it) standing alone at the edge.
            return redact(redact(value[:TARGET_CHARS + _REDACT_MARGIN])[:TARGET_CHARS])
    return None


def failure_text(output: str) -> Redacted:
    """The head and tail of a failed tool's output, redacted; the middle of a long one is left out."""
    output = output.replace("\x00", "")
    if len(output) <= FAILURE_HEAD_CHARS + FAILURE_TAIL_CHARS:
        return redact(output.strip())
    # Redacted past each cut (a secret that straddles it is still whole), cut, and the joined text once more.
    head = redact(output[:FAILURE_HEAD_CHARS + _REDACT_MARGIN])[:FAILURE_HEAD_CHARS]
    tail = redact(output[-(FAILURE_TAIL_CHARS + _REDACT_MARGIN):])[-FAILURE_TAIL_CHARS:]
    return redact(f"{head.rstrip()}\n[… {len(output) - FAILURE_HEAD_CHARS - FAILURE_TAIL_CHARS} characters left out …]"
                  f"\n{tail.lstrip()}")


# A test run that ran nothing, said at the start of a line of its output: the call "succeeded" (jest's
# --passWithNoTests, a `| tail` that hides the exit code) and the session then looked for the way that runs the
# tests. Only these runners' own words, at a line's start (a file read or a grep shows them after a prefix); and a
# shell's "command not found" a pipe's exit code hid (`npx jest … | tail` said `sh: jest: command not found`).
RAN_NOTHING_LINES = ("no tests found", "no test files found", "collected 0 items", "no tests ran in", "ran 0 tests in",
                     "testing: warning: no tests to run", "no projects matched the filters")
_SHELLS = ("sh: ", "bash: ", "zsh: ", "(eval):")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What one of those lines holds whatever its case (its first letter left off), as text and as a transcript line's
# bytes: narrow, since "to test" is in half the lines an agent writes. A run that ran nothing prints little, so only
# the head of an output (of a line) is looked at: the fast paths that skip a result line unread stay fast.
_HINTS = ("ests found", "est files found", "ollected 0 items", "ests ran", "an 0 tests", "ests to run",
          "rojects matched", "ommand not found")
# A commit a hook stopped, in its runner's own words (pre-commit's "- hook id: …" under a "…Failed" status line,
# husky's "husky - pre-commit script failed"), though the call exited 0: a `git commit … | tail` hides the status.
_HOOK_HINTS = ("- hook id: ", "husky - ")
_BYTE_HINTS = tuple(hint.encode() for hint in (*_HINTS, *_HOOK_HINTS))
HEAD_CHARS = 10_000


def may_have_failed_quietly(raw: bytes) -> bool:
    """Whether a transcript line may hold a call that failed though it exited 0 (``failed_quietly``): it is
    parsed, not skipped unread."""
    return any(raw.find(hint, 0, HEAD_CHARS) >= 0 for hint in _BYTE_HINTS)


def failed_quietly(output: str) -> bool:
    """Whether a shell call that exited 0 failed all the same: its test runner ran nothing, or a commit hook
    stopped the commit."""
    return ran_nothing(output) or hook_stopped_commit(output)


def hook_stopped_commit(output: str) -> bool:
    """Whether a call's output is a commit hook's refusal (a check's "Failed" with its "- hook id:", husky's
    "script failed") with no commit made after it (git's "[main e391026] subject" line)."""
    head = output[:HEAD_CHARS]
    if not any(hint in head for hint in _HOOK_HINTS):
        return False  # the common case, without splitting the output
    lines = [line.strip() for line in head.splitlines()]
    refused = any(line.startswith("- hook id: ") for line in lines) and any(line.endswith("Failed") for line in lines) \
        or any(line.startswith("husky - ") and " failed" in line for line in lines)
    return refused and not any(_commit_line(line) for line in lines)


def _commit_line(line: str) -> bool:
    """git's line for a commit it made: ``[main e391026] subject`` (``[main (root-commit) e391026]``)."""
    if not line.startswith("[") or "]" not in line:
        return False
    words = line[1:line.index("]")].split()
    return len(words) >= 2 and 7 <= len(words[-1]) <= 40 and all(c in "0123456789abcdef" for c in words[-1])


def ran_nothing(output: str) -> bool:
    """Whether a shell call's output says its test runner (or workspace filter) found nothing to run, or that the
    shell did not find the command, though the call exited 0."""
    head = output[:HEAD_CHARS]
    if not any(hint in head for hint in _HINTS):
        return False  # the common case, without splitting the output
    for line in _ANSI.sub("", head.lower()).splitlines():
        line = line.strip(" =")
        if line.startswith(RAN_NOTHING_LINES) or line.startswith(_SHELLS) and "command not found" in line:
            return True
    return False


ENGRAM_TOOLS = "engram_"  # Engram's memory tools as opencode (MCP: <server>_<tool>) and pi (its extension) name them
_FILE_TOOLS = ("Read", "Write", "Edit", "MultiEdit")


def claude_tool(name: object, arguments: object, names: dict[str, str], path_key: str) -> tuple[str, dict]:
    """A tool call of an agent that names its tools in lower case (opencode, pi) as Claude Code's tool name and input
    keys: `names` maps its tools, `path_key` is its key of a file's path (``filePath``, ``path``); an unknown tool
    keeps its own name, Engram's memory tools take Claude Code's ``mcp__engram__`` names."""
    name = name if isinstance(name, str) and name else "tool"
    args = arguments if isinstance(arguments, dict) else {}
    if name.startswith(ENGRAM_TOOLS):
        return "mcp__engram__" + name[len(ENGRAM_TOOLS):], args
    canonical = names.get(name, name)
    if canonical == "Bash":
        command = args.get("command")
        return canonical, ({"command": command} if isinstance(command, str) else {})
    if canonical in _FILE_TOOLS:
        path = args.get(path_key) if isinstance(args.get(path_key), str) else args.get("file_path")
        return canonical, ({"file_path": path} if isinstance(path, str) and path else {})
    if canonical in ("Glob", "Grep", "LS"):
        return canonical, {k: args[k] for k in ("pattern", "path") if isinstance(args.get(k), str)}
    if canonical == "WebFetch" and isinstance(args.get("url"), str):
        return canonical, {"url": args["url"]}
    return canonical, args
