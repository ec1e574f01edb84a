"""Register Engram with pi: its extension in ``~/.pi/agent/extensions/engram.ts`` (the agent folder is
``$PI_CODING_AGENT_DIR`` when that is set), which pi finds there by itself.

pi has no command hooks and no MCP: it loads TypeScript extensions. Engram's (``pi_extension.ts``, written by
``shipped_file`` with this registration's commands) runs the same hook scripts as every agent, named for pi by an
argument after the script (``… pretooluse.py pi``), at pi's moments:

- a session's first prompt (``before_agent_start``): ``recall_hook/session_start.py pi`` — the digest, a message
  of Engram's after the prompt (pi's session-start message would arrive after the prompt as well);
- after each tool call, failed or not (``tool_result``): ``recall_hook/pretooluse.py pi`` — the bites of the user's
  message, what earlier sessions left about the file or command, and, after a call pi marks ``isError``, what
  fixed the same failure; appended to the call's result (pi's ``tool_call`` event can only block or patch a call,
  so a call's lessons are told right after it);
- optionally, each prompt (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py pi``;
- Engram's MCP tools, registered by the extension as pi tools ``engram_memory_recall``, … (their names,
  descriptions and input schemas taken from Engram's MCP server when installing), each call sent to Engram's MCP
  bridge (``<engram's python> -I -m mcp_tools.bridge``), which the extension starts on the first call.

Uninstall removes the extension file (only while it is Engram's), and the folders install made for it when
nothing else is in them; nothing else of pi's is touched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, passed, shown_path
from processor.config import AGENT_NAMES, Settings, pi_agent_dir
from processor.install.json_file import ChangeReport
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    HookSpec,
    Registration,
    on_this_machine,
)
from processor.install.shipped_file import PluginHooks, ShippedFile, remove_empty_folders

NAME = "pi"
TITLE = AGENT_NAMES[NAME]
COMMAND = "pi"  # on PATH when pi is installed
EXTENSION_FILE = Path("extensions") / "engram.ts"
FIX = "engram install --agent pi"
# The extension's names for its hooks, the pi event each serves, and the hook script it runs.
EXTENSION_HOOKS = PluginHooks(NAME, (("sessionStart", "before_agent_start", SESSION_START),
                                     ("afterTool", "tool_result", PRETOOLUSE)),
                              ("prompt", "before_agent_start", PROMPT_SUBMIT))


def found(env: Mapping[str, str] | None = None) -> bool:
    """pi is here: its agent folder ($PI_CODING_AGENT_DIR, ~/.pi/agent) exists, or `pi` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([pi_agent_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), under the pi events the extension runs them at; the prompt hook only when asked for."""
    return EXTENSION_HOOKS.specs(registration)


def extension(folder: Path) -> ShippedFile:
    return ShippedFile("pi_extension.ts", folder / EXTENSION_FILE)


def mcp_tools() -> tuple[list[dict[str, Any]], str]:
    """Engram's MCP tools as its server lists them (name, title, description, input schema), and the protocol
    version its bridge speaks: what the extension registers with pi."""
    from mcp.types import LATEST_PROTOCOL_VERSION

    from mcp_tools.server import build_server

    listed = asyncio.run(build_server(structured=False).list_tools())
    tools = [{key: value for key, value in tool.model_dump(by_alias=True, exclude_none=True).items()
              if key in ("name", "title", "description", "inputSchema")} for tool in listed]
    return tools, LATEST_PROTOCOL_VERSION


def extension_config(registration: Registration, existing: dict[str, Any] | None) -> dict[str, Any]:
    """The extension's ENGRAM line: its hooks' argv and timeouts (the prompt hook as `prompt_submit` asks: kept as
    installed when not said), Engram's MCP tools and the bridge's command."""
    tools, version = mcp_tools()
    server = registration.mcp_server
    return {**EXTENSION_HOOKS.config(registration, existing), "mcp": [server.command, *server.args], "tools": tools,
            "protocolVersion": version}


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            folder: Path | None = None,
            **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
            ) -> ChangeReport:
    """Write Engram's extension into pi's agent folder (`folder`, default from `env`)."""
    shipped = extension(folder or pi_agent_dir(env))
    change = shipped.plan(extension_config(registration, shipped.config()))
    if not dry_run:
        change = shipped.apply(change)
    return ChangeReport("install", dry_run, (change,), TITLE)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None, folder: Path | None = None
              ) -> ChangeReport:
    """Remove Engram's extension (only while it is Engram's); a missing one is nothing to do."""
    env = os.environ if env is None else env
    folder = folder or pi_agent_dir(env)
    shipped = extension(folder)
    if shipped.current() is None:
        return ChangeReport("uninstall", dry_run, (), TITLE)
    change = shipped.plan(None)
    if not dry_run:
        change = shipped.apply(change)
        # The agent folder install made (and ~/.pi with it), when nothing else is in it: pi is then not found here.
        remove_empty_folders([folder, *([folder.parent] if not env.get("PI_CODING_AGENT_DIR") and
                                        folder == pi_agent_dir(env) else [])])
    return ChangeReport("uninstall", dry_run, (change,), TITLE)


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of pi: Engram's extension in its agent folder, and the programs it runs."""
    folder = settings.pi_dir if settings.pi_dir is not None else pi_agent_dir(env)
    return [_check(folder, env)]


def _check(folder: Path, env: Mapping[str, str]) -> Check:
    name = "pi"
    if not on_this_machine([folder], COMMAND, env):
        return passed(name, f"not installed here ({shown_path(folder, env)} does not exist); nothing to check")
    shipped = extension(folder)
    wrong = shipped.check(name, env, FIX)
    if wrong is not None:
        return wrong
    events = ", ".join(spec.event for spec, required in hook_specs(EVENTS_AND_MARKERS) if required)
    return passed(name, f"extension {shown_path(shipped.path, env)} ({events}, Engram's memory tools)")
