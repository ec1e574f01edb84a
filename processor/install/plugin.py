"""Engram as a Claude Code plugin directory, for ``claude --plugin-dir <dir>``.

Generated from the same ``Registration`` as ``engram install``, so the two never disagree:

    <dir>/.claude-plugin/plugin.json       manifest (name, version, description)
    <dir>/.claude-plugin/marketplace.json  a one-plugin marketplace whose plugin is <dir> itself
    <dir>/hooks/hooks.json                 Claude Code's hooks, as ``engram install`` registers them
    <dir>/.mcp.json                        the ``engram`` stdio MCP server

Two ways to load it: ``claude --plugin-dir DIR`` for one session, or, to keep it installed,
``/plugin marketplace add DIR`` then ``/plugin install engram@engram-local`` (the same as
``claude plugin marketplace add DIR`` and ``claude plugin install engram@engram-local``): a local
marketplace, so nothing is fetched from the network.

The commands hold absolute paths of this machine's interpreters and hook script, so the
directory is generated locally (``engram plugin --out DIR`` or similar), not shipped as is.
Using the plugin and ``engram install`` together is harmless (the hook injects once per message
whichever copy runs first) but pointless: pick one.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

from processor.config import DISTRIBUTION
from processor.files import write_atomic
from processor.install import claude
from processor.install.registration import Registration, default_registration

PLUGIN_NAME = "engram"
DESCRIPTION = (
    "Memory for Claude Code: recalls what past sessions learned as short memory bites before tool "
    "calls, expandable with the memory_expand tool."
)
MANIFEST = Path(".claude-plugin") / "plugin.json"
MARKETPLACE = Path(".claude-plugin") / "marketplace.json"
MARKETPLACE_NAME = "engram-local"  # not "engram": a marketplace and its plugin are told apart in `engram@engram-local`
HOOKS = Path("hooks") / "hooks.json"
MCP = Path(".mcp.json")


def _version() -> str | None:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None  # running from an uninstalled checkout: version is optional in plugin.json


def plugin_files(registration: Registration) -> dict[Path, dict[str, Any]]:
    """Relative path -> JSON content of every file in the plugin layout."""
    manifest: dict[str, Any] = {"name": PLUGIN_NAME}
    version = _version()
    if version:
        manifest["version"] = version
    manifest["description"] = DESCRIPTION
    server = registration.mcp_server
    marketplace = {
        "name": MARKETPLACE_NAME,
        "owner": {"name": "Engram (generated on this machine by `engram plugin`)"},
        "plugins": [{"name": PLUGIN_NAME, "source": "./", "description": DESCRIPTION,
                     **({"version": version} if version else {})}],
    }
    return {
        MANIFEST: manifest,
        MARKETPLACE: marketplace,
        HOOKS: {
            "description": "Engram: memory bites once per user message; recall set up per session",
            "hooks": claude.hooks_table(registration),
        },
        MCP: {"mcpServers": {server.name: claude.server_entry(registration)}},
    }


def write_plugin(directory: Path, registration: Registration | None = None) -> list[Path]:
    """Write (or refresh) the plugin layout under `directory`; other files there are left alone.

    Returns the paths written.
    """
    registration = registration or default_registration()
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory}: not a directory; choose another --out path")
    written = []
    for relative, content in plugin_files(registration).items():
        path = directory / relative
        write_atomic(path, json.dumps(content, indent=2, ensure_ascii=False) + "\n", keep_existing=True)
        path.chmod(0o644)  # nothing secret in these files, unlike settings.json
        written.append(path)
    return written
