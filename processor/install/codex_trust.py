"""The Codex CLI's hook trust: which key and hash a hook has, and whether config.toml records it as trusted.

Codex runs a user's hook only once it is trusted (it skips an untrusted one without a word). A hook's trust
is ``[hooks.state."<key>"] trusted_hash = "<hash>"`` in ``$CODEX_HOME/config.toml``, where the key is
``<hooks.json path>:<event in snake_case>:<group index>:<handler index>`` and the hash is Codex's
fingerprint of the hook's normalized identity: sha256 of its canonical JSON (keys sorted, no spaces)
``{"event_name", "matcher"?, "hooks": [{"type": "command", "command", "timeout", "async"}]}``
(codex-rs ``hooks/src/engine/discovery.rs`` ``command_hook_hash`` and ``config/src/fingerprint.rs``
``version_for_toml``; checked against what ``codex app-server``'s ``hooks/list`` reports for Codex 0.171.0,
and by tests/e2e/test_codex_and_gemini_cli.py, which runs Codex without bypassing trust). A hook whose identity changes
(another interpreter, another timeout) needs trusting again; ``engram install`` records it, ``engram doctor``
checks it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.install.registration import is_engram_hook

DEFAULT_TIMEOUT = 600  # seconds, as Codex fills a hook without one
# Events whose matcher Codex ignores (it is not part of their identity).
_NO_MATCHER = frozenset({"UserPromptSubmit", "Stop"})


def event_label(event: str) -> str:
    """Codex's snake_case label of an event: PreToolUse → pre_tool_use."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def hook_key(hooks_path: Path, event: str, group: int, handler: int) -> str:
    return f"{os.path.abspath(hooks_path)}:{event_label(event)}:{group}:{handler}"


def trust_hash(event: str, matcher: object, entry: dict[str, Any]) -> str:
    """Codex's fingerprint of a command hook (its `entry` as hooks.json holds it) in a group with `matcher`."""
    handler: dict[str, Any] = {"type": "command", "command": entry.get("command"),
                               "timeout": max(int(entry.get("timeout") or DEFAULT_TIMEOUT), 1),
                               "async": bool(entry.get("async", False))}
    if entry.get("statusMessage") is not None:
        handler["statusMessage"] = entry["statusMessage"]
    identity: dict[str, Any] = {"event_name": event_label(event), "hooks": [handler]}
    if isinstance(matcher, str) and event not in _NO_MATCHER:
        identity["matcher"] = matcher
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class EngramHook:
    """One of Engram's hooks in hooks.json: where it is (its trust key) and its trust hash."""

    event: str
    key: str
    hash: str


def engram_hooks(hooks_file: dict[str, Any], hooks_path: Path) -> list[EngramHook]:
    """Engram's hooks in a hooks.json object, in file order."""
    found: list[EngramHook] = []
    hooks = hooks_file.get("hooks")
    if not isinstance(hooks, dict):
        return found
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                continue
            for h, entry in enumerate(inner):
                if is_engram_hook(entry):
                    found.append(EngramHook(event, hook_key(hooks_path, event, g, h),
                                            trust_hash(event, group.get("matcher"), entry)))
    return found


def recorded_trust(config: dict[str, Any], key: str) -> str | None:
    """The trusted_hash config.toml records for a hook key (None: never trusted)."""
    hooks = config.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    entry = state.get(key) if isinstance(state, dict) else None
    value = entry.get("trusted_hash") if isinstance(entry, dict) else None
    return value if isinstance(value, str) else None


def untrusted(config: dict[str, Any], hooks: list[EngramHook]) -> list[EngramHook]:
    """Those of Engram's hooks Codex would skip: no trust recorded, or trust of an earlier version of the hook."""
    return [hook for hook in hooks if recorded_trust(config, hook.key) != hook.hash]
