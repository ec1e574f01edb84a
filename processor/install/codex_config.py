"""Engram's entries in the Codex CLI's ``config.toml``: added as one marked block, removed byte for byte.

What Engram adds is its MCP server (``[mcp_servers.engram]``) and the trust of its hooks
(``[hooks.state."<key>"]``). The file is parsed with tomlkit (an invalid file is an error naming the line,
and nothing is written); Engram's tables are written by tomlkit too, as one block at the end of the file
between two comment lines, so that uninstall gives the user's file back exactly as it was. Tables with a
header are valid anywhere in TOML, so the block's place changes nothing of what Codex reads. Entries of
Engram's found elsewhere (a hand edit, an earlier version, Codex's own write of a trust it was given) are
taken out with tomlkit, which keeps the rest of the file's formatting.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from processor.install.registration import MCP_SERVER_NAME, InstallError, is_engram_mcp_server

BLOCK_START = "# >>> engram: added by `engram install`, removed by `engram uninstall`\n"
# The same line when the file did not end with a newline (uninstall then takes one more newline away), and when
# install created the file (uninstall then removes it, when nothing else was added to it since).
BLOCK_START_BARE = "# >>> engram: added by `engram install` (the file had no final newline)\n"
BLOCK_START_NEW = "# >>> engram: added by `engram install`, which created this file\n"
BLOCK_END = "# <<< engram\n"


@dataclass(frozen=True)
class ConfigText:
    """config.toml as read: its text (None: no file) and parsed data."""

    path: Path
    text: str | None
    data: dict[str, Any]


def read_config(path: Path) -> ConfigText:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ConfigText(path, None, {})
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: cannot read ({exc}); nothing was changed") from None
    try:
        tomlkit.parse(text)
        data = tomllib.loads(text)
    except (tomlkit.exceptions.TOMLKitError, tomllib.TOMLDecodeError) as exc:
        raise InstallError(f"{path}: invalid TOML ({exc}); fix or move the file aside (Codex cannot read it "
                           "either), nothing was changed") from None
    return ConfigText(path, text, data)


def split_block(text: str) -> tuple[str, str | None]:
    """(the file without Engram's block, the block's body) — (text, None) when there is no whole block."""
    for start_line, extra in ((BLOCK_START, 1), (BLOCK_START_BARE, 2), (BLOCK_START_NEW, 0)):
        start = text.find(start_line)
        if start < 0 or (start > 0 and text[start - 1] != "\n"):
            continue
        end = text.find(BLOCK_END, start)
        if end < 0:
            continue
        body = text[start + len(start_line):end]
        before = text[:start]
        # Install put one blank line before the block (two newlines when the file had no final one).
        cut = min(extra, len(before) - len(before.rstrip("\n")))
        return before[:len(before) - cut] + text[end + len(BLOCK_END):], body
    return text, None


def created_by_engram(text: str) -> bool:
    """Install created the file, and nothing but Engram's block is in it."""
    rest, body = split_block(text)
    return body is not None and not rest.strip() and text.startswith(BLOCK_START_NEW)


def block(server: dict[str, Any] | None, trust: dict[str, str], bare: bool, new: bool = False) -> str:
    """Engram's tables as TOML (tomlkit writes the quoting), between the block's two lines."""
    doc = tomlkit.document()
    if server is not None:
        servers = tomlkit.table(is_super_table=True)
        table = tomlkit.table()
        for key, value in server.items():
            table[key] = value
        servers[MCP_SERVER_NAME] = table
        doc["mcp_servers"] = servers
    if trust:
        hooks = tomlkit.table(is_super_table=True)
        state = tomlkit.table(is_super_table=True)
        for key, value in trust.items():
            entry = tomlkit.table()
            entry["trusted_hash"] = value
            state[key] = entry
        hooks["state"] = state
        doc["hooks"] = hooks
    start = BLOCK_START_NEW if new else BLOCK_START_BARE if bare else BLOCK_START
    return start + tomlkit.dumps(doc).strip("\n") + "\n" + BLOCK_END


def without_engram(text: str, trust_keys: set[str]) -> str:
    """The text without Engram's entries: its block cut out exactly, and any entries of Engram's elsewhere
    (the server, the trust of its hooks' keys) removed with tomlkit."""
    rest, _ = split_block(text)
    doc = tomlkit.parse(rest)
    changed = False
    servers = doc.get("mcp_servers")
    if servers is not None and hasattr(servers, "get") and is_engram_mcp_server(_plain(servers.get(MCP_SERVER_NAME))):
        del servers[MCP_SERVER_NAME]
        changed = True
        if not servers:
            del doc["mcp_servers"]
    hooks = doc.get("hooks")
    state = hooks.get("state") if hooks is not None and hasattr(hooks, "get") else None
    if state is not None and hasattr(state, "get"):
        for key in [k for k in state if k in trust_keys]:
            del state[key]
            changed = True
        if not state:
            del hooks["state"]
        if not hooks:
            del doc["hooks"]
    return tomlkit.dumps(doc) if changed else rest


def with_engram(text: str | None, server: dict[str, Any] | None, trust: dict[str, str],
                trust_keys: set[str], path: Path) -> str:
    """The text with Engram's block (its server and the trust of its hooks) at the end, other entries of
    Engram's taken out first; an error naming the fix when the result would not be valid TOML."""
    rest = without_engram(text, trust_keys) if text else ""
    servers = tomllib.loads(rest).get("mcp_servers") if rest else None
    existing = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    if existing is not None:
        raise InstallError(f"{path}: an MCP server named {MCP_SERVER_NAME!r} is already configured and is not "
                           f"Engram's ({str(existing)[:200]}); remove it (codex mcp remove {MCP_SERVER_NAME}) "
                           "and retry")
    if server is None and not trust:
        return rest
    bare = bool(rest) and not rest.endswith("\n")
    separator = "\n\n" if bare else ("\n" if rest else "")
    result = rest + separator + block(server, trust, bare, new=text is None or (not rest and _was_new(text)))
    try:
        tomllib.loads(result)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path}: Engram's entries cannot be added to this file ({exc}; an inline `hooks` or "
                           "`mcp_servers` table cannot take more keys); write them as [tables], or add these "
                           f"lines by hand:\n{block(server, trust, False)}") from None
    return result


def _was_new(text: str | None) -> bool:
    return text is not None and created_by_engram(text)


def _plain(value: object) -> object:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value
