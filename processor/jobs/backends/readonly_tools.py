"""What Engram's own agent may do when it checks a memory against the code: read, search, and four git verbs.

The inquisitor's LLM check gives the Claude child Read, Glob and Grep, plus Bash restricted to
``git log``, ``git show``, ``git diff`` and ``git blame``. The restriction is enforced here, in the
SDK's ``can_use_tool`` callback, not by a prompt: one plain git command, no shell syntax at all
(no ``;``, ``&&``, pipes, redirections, ``$(…)`` or backticks), no ``-c`` configuration, no option
that writes a file or runs a program (``--output``, ``--ext-diff``, ``--textconv``).
"""

from __future__ import annotations

import logging
import shlex
from typing import Any

log = logging.getLogger(__name__)

READ_TOOLS = ("Read", "Glob", "Grep")
GIT_VERBS = frozenset({"log", "show", "diff", "blame"})
_SHELL_SYNTAX = frozenset(";&|<>$`\\\n\r(){}!*?[]#")
_FORBIDDEN_OPTIONS = ("--output", "--ext-diff", "--textconv", "--exec", "--upload-pack", "--config", "--open-files")


# Files that exist to hold credentials: what the agent's Read/Grep return goes to the model unredacted (the
# redaction door sees prompts, not what a tool reads on the model's behalf), so they are not read at all.
_SECRET_FILES = (".env", ".netrc", ".npmrc", ".pypirc", ".pgpass", "id_rsa", "id_ecdsa", "id_ed25519", "id_dsa",
                 "credentials", "credentials.json", "secrets.json", "secrets.yaml", "secrets.yml")
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".tfvars", ".env")


def holds_secrets(tool_input: dict[str, Any]) -> str | None:
    """The path a Read/Glob/Grep names when it is a credentials file (``.env``, a private key…), else None."""
    for key in ("file_path", "path", "pattern", "glob"):
        value = tool_input.get(key)
        if not isinstance(value, str) or not value:
            continue
        name = value.rstrip("/").rsplit("/", 1)[-1].lower()
        if name in _SECRET_FILES or name.startswith((".env.", "id_rsa")) or name.endswith(_SECRET_SUFFIXES):
            return value
    return None


def bash_allowed(command: str) -> tuple[bool, str]:
    """(allowed, why) for one Bash command the agent asked to run."""
    if not isinstance(command, str) or not command.strip():
        return False, "empty command"
    bad = sorted({c for c in command if c in _SHELL_SYNTAX})
    if bad:
        return False, f"shell syntax is not allowed ({' '.join(repr(c) for c in bad)}): run one plain git command"
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return False, f"cannot parse the command: {exc}"
    if not words or words[0] != "git":
        return False, "only git log, git show, git diff and git blame may run"
    i = 1
    while i < len(words) and words[i].startswith("-"):
        if words[i] == "--no-pager":
            i += 1
        elif words[i] == "-C" and i + 1 < len(words):
            i += 2
        else:
            return False, f"git option {words[i]!r} is not allowed before the subcommand"
    if i >= len(words) or words[i] not in GIT_VERBS:
        verb = words[i] if i < len(words) else "(none)"
        return False, f"git {verb} is not allowed: only git log, git show, git diff and git blame"
    for word in words[i + 1:]:
        if word.startswith(_FORBIDDEN_OPTIONS):
            return False, f"the option {word.split('=')[0]} is not allowed"
    return True, "read-only git command"


async def can_use_tool(tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
    """The SDK's permission callback for the read-only check: reading tools yes, Bash per bash_allowed."""
    from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

    if tool_name in READ_TOOLS:
        secret = holds_secrets(tool_input)
        if secret:
            return PermissionResultDeny(message=f"{secret} is not read: files that hold credentials never reach the "
                                                "model (redaction cannot see what a tool reads)")
        return PermissionResultAllow()
    if tool_name == "Bash":
        ok, why = bash_allowed(str(tool_input.get("command", "")))
        if ok:
            return PermissionResultAllow()
        log.info("denied the checking agent's command %r: %s", str(tool_input.get("command", ""))[:200], why)
        return PermissionResultDeny(message=why)
    return PermissionResultDeny(message=f"{tool_name} is not available: this agent only reads")
