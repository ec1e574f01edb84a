"""Real sessions in time order: which transcripts a project holds, their typed prompts, and the tool calls
each prompt's work made — what a precision replay walks through (``bench/precision.py``).

A session's prompts are the user lines Claude Code wrote for what the user typed: the capture parser's
verdict (no tool results, meta lines, slash-command plumbing, compaction summaries or injected context),
minus interruptions. The tool calls of a prompt are the assistant's tool uses until the next prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

try:
    from processor.capture.captured import CapturedLine
    from processor.capture.claude import ClaudeFormat, parse_line, session_id_for
except ImportError:  # a baseline tree from before capture's agents were peers (5c1acfc): the same, by older names
    from processor.capture.discover import TranscriptFilter as ClaudeFormat
    from processor.capture.parse import CapturedLine, parse_line
    from processor.capture.tailer import session_id_for

INTERRUPTION = "[Request interrupted by user"
# What the user ran in Claude Code's shell mode ("! cmd") and its output: context for the next prompt, not a
# prompt of its own (no agent turn answers it).
SHELL_MODE = ("<bash-input>", "<bash-stdout>", "<bash-stderr>")


@dataclass
class ToolCall:
    """One tool use of the assistant, as the PreToolUse hook receives it, and how it ended (a failed result's
    text is what the PostToolUseFailure hook receives)."""

    uuid: str  # the assistant line that made it
    tool_use_id: str
    name: str
    input: dict
    ts_ms: int | None
    error: str | None = None  # the result's text when it failed (is_error)
    output: str | None = None  # a sub-agent's result when it returned (what Claude Code's PostToolUse hook gets)
    cwd: str | None = None  # where it ran: its line's, which follows the shell's `cd`s (the hooks' event `cwd`)


@dataclass
class Prompt:
    session: str
    uuid: str
    text: str
    ts_ms: int | None
    cwd: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    branch: str | None = None  # the git branch the prompt's line names


@dataclass
class Session:
    """One main transcript: its raw lines (with their times) and its prompts."""

    session_id: str
    path: Path
    lines: list[tuple[int | None, bytes]]
    prompts: list[Prompt]
    first_message_ms: int | None = None  # when its first real message (not a meta line) was written

    @property
    def start_ms(self) -> int | None:
        """When the session started: its first real message. A stale meta line ("Caveat: …", dated days
        earlier) must not move it, or sessions that never overlapped would see each other's work."""
        return self.first_message_ms if self.first_message_ms is not None else \
            next((ts for ts, _ in self.lines if ts is not None), None)


def _line_time(raw: bytes) -> int | None:
    try:
        entry = json.loads(raw)
        return int(datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, UnicodeDecodeError, RecursionError, TypeError, KeyError, AttributeError):
        return None


# The sub-agent tools whose result, when they return, reaches a PostToolUse hook (Engram's matcher: Task|Agent).
SUB_AGENT_TOOLS = ("Task", "Agent")


def _results(raw: bytes, failed: bool = True) -> dict[str, str]:
    """tool_use_id → the text of each failed tool result (``is_error``) a user line carries; with `failed` false,
    of each result that did not fail."""
    if failed and b'"is_error":true' not in raw and b'"is_error": true' not in raw:
        return {}
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    content = (entry.get("message") or {}).get("content") if isinstance(entry, dict) and \
        isinstance(entry.get("message"), dict) else None
    found = {}
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result" and (block.get("is_error") is True) == failed:
            text = block.get("content")
            if isinstance(text, list):
                text = "\n".join(b.get("text", "") for b in text if isinstance(b, dict))
            found[str(block.get("tool_use_id"))] = str(text or "")
    return found


def _tool_uses(raw: bytes) -> list[tuple[str, str, dict]]:
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return []
    if not isinstance(entry, dict) or entry.get("type") != "assistant" or entry.get("isSidechain") is True:
        return []
    content = (entry.get("message") or {}).get("content") if isinstance(entry.get("message"), dict) else None
    if not isinstance(content, list):
        return []
    return [(str(block.get("id") or ""), str(block.get("name") or ""),
             block.get("input") if isinstance(block.get("input"), dict) else {})
            for block in content if isinstance(block, dict) and block.get("type") == "tool_use"]


def is_prompt(parsed: object) -> bool:
    return (isinstance(parsed, CapturedLine) and parsed.role == "user"
            and not parsed.text.startswith(INTERRUPTION) and not parsed.text.lstrip().startswith(SHELL_MODE))


def read_session(path: Path) -> Session:
    session_id = session_id_for(path)
    lines: list[tuple[int | None, bytes]] = []
    prompts: list[Prompt] = []
    calls: dict[str, ToolCall] = {}
    sub_agents: dict[str, ToolCall] = {}  # the sub-agents' calls whose result is not read yet
    first_message: int | None = None
    with open(path, "rb") as f:
        for raw in f:
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            ts = _line_time(raw)
            lines.append((ts, raw))
            parsed = parse_line(raw)
            if first_message is None and isinstance(parsed, CapturedLine):
                first_message = parsed.ts_ms or ts
            for tool_use_id, error in _results(raw).items():
                if tool_use_id in calls:
                    calls[tool_use_id].error = error
            if any(use_id.encode() in raw for use_id in sub_agents):
                for tool_use_id, output in _results(raw, failed=False).items():
                    if sub_agents.pop(tool_use_id, None) is not None:
                        calls[tool_use_id].output = output
            if is_prompt(parsed):
                assert isinstance(parsed, CapturedLine)
                prompts.append(Prompt(session_id, parsed.uuid, parsed.text, parsed.ts_ms or ts, parsed.cwd,
                                      branch=parsed.git_branch))
            elif prompts and isinstance(parsed, CapturedLine) and parsed.role == "assistant":
                made = [ToolCall(parsed.uuid, use_id, name, tool_input, parsed.ts_ms or ts, cwd=parsed.cwd)
                        for use_id, name, tool_input in _tool_uses(raw)]
                prompts[-1].tool_calls += made
                calls.update((call.tool_use_id, call) for call in made)
                sub_agents.update((call.tool_use_id, call) for call in made if call.name in SUB_AGENT_TOOLS)
    return Session(session_id, path, lines, prompts, first_message)


def project_sessions(project_dir: Path) -> list[Session]:
    """The project's main transcripts that hold a timestamped line, oldest first (by their first line)."""
    accepted = ClaudeFormat(project_dir.parent)
    sessions = [read_session(p) for p in sorted(project_dir.glob("*.jsonl")) if accepted.accepts(p)]
    sessions = [s for s in sessions if s.start_ms is not None]
    return sorted(sessions, key=lambda s: (s.start_ms, s.session_id))


def projects(projects_dir: Path) -> list[Path]:
    return sorted(p for p in projects_dir.iterdir() if p.is_dir())
