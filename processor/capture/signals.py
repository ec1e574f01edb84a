"""Which tool calls carry high-signal text worth a memory of its own, and whether they succeeded.

A commit message (`git commit -m …`, several `-m`, the heredoc form), the reason given when an issue
or pull request is closed or created (`gh issue close --comment`, `gh pr create --body`, `bd close
--reason`…) and the user's answers to AskUserQuestion say in a few words what was decided or fixed. A
command started in the background (Claude Code's ``run_in_background``) outlives its call, and may outlive
its session: what the next one starts beside it finds its port taken (``processor/memory/left_running.py``). A
local override a session writes (``apps/web/.env.local``: "VITE_API_URL=https://api-staging…") stays when the
session ends, and what the next one starts reads it (``processor/memory/overrides.py``).
The tool_use names the text; only its tool_result, on a later transcript line, says whether it
happened: a commit rejected by a hook or a failed command must not be remembered.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from dataclasses import dataclass

from processor.redaction import Redacted, redacted_json

log = logging.getLogger(__name__)

# git's line for a commit it made, its branch first: `[main abc1234] subject`, `[main (root-commit) abc1234] …`,
# `[detached HEAD abc1234] …` (on no branch).
_COMMIT_LINE = re.compile(r"^\[(?:([^\s\]\n()]+)(?: \([^)\n]*\))? )?[^\]\n]*?\b([0-9a-f]{7,40})\] ", re.MULTILINE)
# Claude Code's result for a command started in the background: the task's id, which a TaskStop names.
_BACKGROUND_TASK = re.compile(r"running in background with ID: ([\w-]+)")
STARTED = "Started in the background"  # how the memory of a background start begins (memory/left_running.py)
WROTE = "Wrote local override"  # how the memory of a written override begins (memory/overrides.py)
OVERRIDE_CHARS = 400  # a written override longer than this is a file of the project, not a few settings
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\b", re.DOTALL)
_BUGFIX = re.compile(r"\b(fix(?:es|ed|ing)?|bug(?:fix)?|regression|crash(?:es|ed)?|broken|hotfix)\b", re.IGNORECASE)
_DECISION = re.compile(r"\b(decid\w*|decision|chose|choose|chosen|instead of|switch(?:ed)? to|prefer\w*|"
                       r"going with|adopt\w*|we will|won't fix|wontfix)\b", re.IGNORECASE)
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
# (tool, subcommand words, the options whose value is the text worth keeping)
_TRACKERS: tuple[tuple[str, tuple[str, ...], frozenset[str]], ...] = (
    ("gh", ("issue", "close"), frozenset({"--comment", "-c", "--reason", "-r"})),
    ("gh", ("pr", "close"), frozenset({"--comment", "-c"})),
    ("gh", ("issue", "create"), frozenset({"--title", "-t", "--body", "-b"})),
    ("gh", ("pr", "create"), frozenset({"--title", "-t", "--body", "-b"})),
    ("gh", ("pr", "merge"), frozenset({"--subject", "-t", "--body", "-b"})),
    ("gh", ("issue", "comment"), frozenset({"--body", "-b"})),
    ("gh", ("pr", "comment"), frozenset({"--body", "-b"})),
    ("bd", ("close",), frozenset({"--reason", "-r"})),
    ("bd", ("create",), frozenset({"--title", "-t", "--description", "-d"})),
)
_warned: set[str] = set()


@dataclass(frozen=True)
class PendingSignal:
    """What a tool_use would mean if it succeeds: the text to remember and how to check the result."""

    source: str  # "commit" | "tracker" | "question" | "background" | "override"
    text: str
    check: str  # "commit_line" | "not_error" | "background_task"


def _warn_once(key: str, message: str) -> None:
    # A malformed input repeats on every call of that tool; one log line says it.
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


def _heredoc_body(value: str) -> str:
    match = _HEREDOC.search(value)
    return match.group(3) if match else value


_SET_ASIDE = re.compile("\x00heredoc(\\d+)\x00")


def _words(command: str) -> list[str] | None:
    # Heredoc bodies (most commit messages) are set aside while shlex splits the line and put back in the
    # word that held them: shlex reads in Python, a character at a time, and a body is most of a commit
    # command. A body is raw text to the shell (quoted delimiter) or expanded later, never split into
    # words, so quotes inside it no longer derail the split either.
    bodies: list[str] = []

    def set_aside(match: re.Match[str]) -> str:
        bodies.append(match.group(3))
        whole, start = match.group(0), match.start(0)
        return f"{whole[:match.start(3) - start]}\x00heredoc{len(bodies) - 1}\x00{whole[match.end(3) - start:]}"

    if "<<" in command and "\x00" not in command:
        command = _HEREDOC.sub(set_aside, command)
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    if bodies:
        words = [_SET_ASIDE.sub(lambda m: bodies[int(m.group(1))], word) for word in words]
    return words


def _segments(words: list[str]) -> list[list[str]]:
    """The simple commands of a shell line (split on ;, &&, ||, |)."""
    out, current = [], []
    for word in words:
        if word and set(word) <= set(";&|"):
            if current:
                out.append(current)
            current = []
        else:
            current.append(word)
    if current:
        out.append(current)
    return out


def _option_values(args: list[str], wanted: frozenset[str], *, short_m: bool = False) -> list[str]:
    values: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if arg.startswith("--") and eq and name in wanted:
            values.append(inline)
        elif arg in wanted and i + 1 < len(args):
            values.append(args[i + 1])
            i += 1
        elif short_m and arg.startswith("-") and not arg.startswith("--") and "m" in arg[1:]:
            # -m, -am, -m"msg": the message follows the m, or is the next word.
            rest = arg[arg.index("m", 1) + 1:]
            if rest:
                values.append(rest)
            elif i + 1 < len(args):
                values.append(args[i + 1])
                i += 1
        i += 1
    return [_heredoc_body(v).strip() for v in values if v and v.strip()]


def _git_commit_message(segment: list[str]) -> str | None:
    if not segment or segment[0] != "git":
        return None
    i = 1
    while i < len(segment) and segment[i].startswith("-"):
        i += 2 if segment[i] in _GIT_VALUE_OPTIONS else 1
    if i >= len(segment) or segment[i] != "commit":
        return None
    messages = _option_values(segment[i + 1:], frozenset({"--message"}), short_m=True)
    return "\n\n".join(messages) or None  # several -m are paragraphs, as git joins them


def _tracker_text(segment: list[str]) -> str | None:
    for tool, words, options in _TRACKERS:
        n = len(words)
        if segment[:1] == [tool] and tuple(segment[1:1 + n]) == words:
            values = _option_values(segment[1 + n:], options)
            if values:
                return f"{tool} {' '.join(words)}: " + "\n\n".join(values)
    return None


def from_bash(command: str) -> PendingSignal | None:
    """The commit message or tracker text a Bash command carries, if any."""
    if "commit" not in command and "gh " not in command and "bd " not in command:
        return None  # most commands: no tokenising
    words = _words(command)
    if words is None:
        return None
    for segment in _segments(words):
        message = _git_commit_message(segment)
        if message:
            return PendingSignal("commit", message, "commit_line")
        text = _tracker_text(segment)
        if text:
            return PendingSignal("tracker", text, "not_error")
    return None


def from_tool_use(name: object, tool_input: object) -> PendingSignal | None:
    """The signal a tool_use block would carry; wrong input types are logged once and ignored."""
    if name == "Bash":
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if not isinstance(command, str):
            _warn_once("Bash", f"Bash tool_use input without a string command ({type(command).__name__}); "
                               "its commit or tracker text, if any, is not captured")
            return None
        found = from_bash(command)
        if found is None and tool_input.get("run_in_background") is True:
            return PendingSignal("background", command, "background_task")
        return found
    if name in ("Write", "Edit") and isinstance(tool_input, dict):
        return _override(tool_input)
    if name == "AskUserQuestion":
        questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
        if not isinstance(questions, list):
            _warn_once("AskUserQuestion", "AskUserQuestion tool_use input without a questions list; "
                                          "its answers are not captured")
            return None
        asked = [q.get("question") for q in questions if isinstance(q, dict) and isinstance(q.get("question"), str)]
        return PendingSignal("question", "\n".join(asked), "not_error")
    return None


def is_override(path: str) -> bool:
    """Whether a file is a local override of the project's settings: a ``*.local`` one (``apps/web/.env.local``,
    ``.env.development.local``), a ``*.local.*`` one (``settings.local.json``), a compose override — not the
    settings themselves (``apps/api/.env``: a change there is the project's own, told by how commands ran)."""
    name = path.rstrip("/").rpartition("/")[2]
    return name.endswith(".local") or ".local." in name or "override" in name


def _override(tool_input: dict) -> PendingSignal | None:
    """A Write (its content) or an Edit (its new text) of a local override, short: what it now sets."""
    path = tool_input.get("file_path")
    text = tool_input.get("content") if "content" in tool_input else tool_input.get("new_string")
    if not isinstance(path, str) or not isinstance(text, str) or not is_override(path) or not text.strip() \
            or len(text) > OVERRIDE_CHARS:
        return None
    return PendingSignal("override", f"{path}\n{text.strip()}", "not_error")


def result_text(content: object) -> str:
    """The text of a tool_result's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def outcome(pending: PendingSignal, is_error: bool, output: str) -> str | None:
    """The memory's text if the tool call succeeded, else None (a failed or hook-rejected call)."""
    if is_error:
        return None
    if pending.check == "commit_line":
        match = _COMMIT_LINE.search(output)
        if not match:
            return None
        branch = match.group(1)  # the branch it went on: a later pull into it meets it if no push took it along
        on = f" on `{branch}`" if branch and branch != "detached" else ""
        return f"Committed {match.group(2)}{on}: {pending.text}"
    if pending.check == "background_task":  # its task's id: a TaskStop naming it stopped it
        task = _BACKGROUND_TASK.search(output)
        return f"{STARTED}{f' (task `{task.group(1)}`)' if task else ''}: `{pending.text}`"
    if pending.source == "override":
        path, _, text = pending.text.partition("\n")
        return f"{WROTE} `{path}`: " + " ".join(line.strip() for line in text.splitlines() if line.strip())
    if pending.source == "question":
        answer = output.split(". You can now continue", 1)[0].removeprefix("User has answered your questions: ")
        return f"Asked the user: {pending.text}\nThe user answered: {answer.strip()}" if answer.strip() else None
    return pending.text


def kind_of(text: str) -> str:
    """decision or bugfix when the text says so, else fact (a background start: a fact, whatever it runs)."""
    if text.startswith((STARTED, WROTE)):
        return "fact"
    if _DECISION.search(text):
        return "decision"
    if _BUGFIX.search(text):
        return "bugfix"
    return "fact"


def pending_json(pending: PendingSignal) -> Redacted:
    return redacted_json({"source": pending.source, "text": pending.text, "check": pending.check})


def pending_from_json(text: str) -> PendingSignal:
    data = json.loads(text)
    return PendingSignal(str(data["source"]), str(data["text"]), str(data["check"]))
