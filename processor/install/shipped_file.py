"""A file Engram ships into an agent's own folder (opencode's plugin, pi's extension): its text made from the
template beside this module with this registration's hook commands, and written, checked and removed exactly.

Agents without command hooks load code instead: Engram's template (``opencode_plugin.js``, ``pi_extension.ts``)
runs the same hook scripts as every agent, and ``engram install`` writes it with one line filled in, ``const
ENGRAM = {…}``: the hooks' argv and timeouts (and what else the agent's template needs). The file's first line
says it is Engram's: install replaces only such a file (another file of that name is an error naming it and the
fix), uninstall removes only such a file.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.check import Check, error, shown_path
from processor.files import write_atomic
from processor.install.json_file import FileChange
from processor.install.registration import HookScript, HookSpec, InstallError, Registration, gone_in

_CONFIG_LINE = "const ENGRAM"  # the template's line that install fills in: `const ENGRAM… = null…`


@dataclass(frozen=True)
class ShippedChange(FileChange):
    """A shipped file's planned (or applied) change. Its diff shows only the ENGRAM line's values, one a line
    (the rest of the file is Engram's template, the same in every install)."""

    shown_before: str = ""
    shown_after: str = ""

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.shown_before.splitlines(keepends=True),
                                            self.shown_after.splitlines(keepends=True),
                                            fromfile=f"{self.path} (before)", tofile=f"{self.path} (after)"))


def remove_empty_folders(folders: list[Path]) -> None:
    """Each folder in turn (a file's folder, then its parent…) while it is empty: the folders install made for an
    agent not otherwise here, so that uninstall leaves nothing behind (and no agent is found that was not)."""
    for folder in folders:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty (or not ours to remove): the folders above it stay as well
            return


@dataclass(frozen=True)
class ShippedFile:
    """One template and where the agent loads it from."""

    template: str  # a file beside this module
    path: Path

    def source(self) -> str:
        return (Path(__file__).with_name(self.template)).read_text(encoding="utf-8")

    @property
    def marker(self) -> str:
        """The template's first line: a file that starts with it is Engram's."""
        return self.source().split("\n", 1)[0]

    def text(self, config: dict[str, Any]) -> str:
        """The template with `config` in its ENGRAM line."""
        lines = self.source().split("\n")
        index = next(i for i, line in enumerate(lines) if line.startswith(_CONFIG_LINE))
        head, _, rest = lines[index].partition("= null")
        lines[index] = head + "= " + json.dumps(config, ensure_ascii=False) + rest
        return "\n".join(lines)

    def current(self) -> str | None:
        """The file's text now (None: no such file); InstallError when it is there and not Engram's."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallError(f"{self.path}: cannot read ({exc}); nothing was changed") from None
        if not text.startswith(self.marker):
            raise InstallError(f"{self.path} exists and is not Engram's; move it aside (or rename it), then retry; "
                               "nothing was changed")
        return text

    def config(self) -> dict[str, Any] | None:
        """The ENGRAM line of the file as written (None: no file, or no readable line)."""
        text = self.current()
        line = next((line for line in (text or "").split("\n") if line.startswith(_CONFIG_LINE)), None)
        if line is None:
            return None
        # `const ENGRAM = {…} // …` (JavaScript), `const ENGRAM: any = {…}; // …` (TypeScript)
        value = line.partition("= ")[2].split(" //", 1)[0].rstrip().removesuffix(";")
        try:
            found = json.loads(value)
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def plan(self, config: dict[str, Any] | None) -> ShippedChange:
        """The change that writes the file with `config` (None: removes it, the file being Engram's alone)."""
        before = self.current()
        after = None if config is None else self.text(config)
        return ShippedChange(self.path, {"text": before}, before, {"text": after}, after or "",
                             removed=after is None and before is not None,
                             shown_before=_shown(self.config() if before else None), shown_after=_shown(config))

    def apply(self, change: FileChange) -> FileChange:
        """Write (or remove) the file as planned; unchanged, nothing is touched. A removed file's folder goes
        with it when nothing else is in it (install made it)."""
        if not change.changed:
            return change
        if change.after["text"] is None:
            self.path.unlink(missing_ok=True)
            remove_empty_folders([self.path.parent])
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, change.after_text, keep_existing=True, durable=True)
        return dataclasses.replace(change, written=True)

    def check(self, name: str, env: dict[str, str] | Any, fix: str) -> Check | None:
        """Doctor's failed check of the file (missing, not Engram's, its programs gone), or None when it is right."""
        shown = shown_path(self.path, env)
        try:
            config = self.config()
        except InstallError as exc:
            return error(name, str(exc).split(";")[0], f"move it aside, then {fix}")
        if config is None:
            return error(name, f"{shown} does not exist: Engram is not told in this agent's sessions", fix)
        commands = [*(config.get("hooks") or {}).values(), config.get("mcp")]
        gone = gone_in(shlex.join(argv) for argv in commands if isinstance(argv, list) and argv)
        if gone:
            return error(name, f"{shown} runs {shown_path(Path(gone[0]), env)}, which is gone", fix)
        return None


@dataclass(frozen=True)
class PluginHooks:
    """The hooks a plugin runs for its agent: (the template's name for each, the agent's event it serves, the hook
    script), and the optional prompt hook likewise."""

    agent: str
    hooks: tuple[tuple[str, str, HookScript], ...]
    prompt: tuple[str, str, HookScript]

    def specs(self, registration: Registration) -> list[tuple[HookSpec, bool]]:
        """(hook, required), under the events the plugin runs them at; the prompt hook only when asked for."""
        found = [(registration.hook_spec(event, script, self.agent), True) for _, event, script in self.hooks]
        _, event, script = self.prompt
        return found + registration.with_prompt_hook(registration.hook_spec(event, script, self.agent))

    def config(self, registration: Registration, existing: dict[str, Any] | None) -> dict[str, Any]:
        """The template's hooks: each one's argv and timeout; the prompt hook as `prompt_submit` asks, kept as the
        installed file has it when not said."""
        specs = {key: registration.hook_spec(event, script, self.agent) for key, event, script in self.hooks}
        key, event, script = self.prompt
        had_prompt = bool(((existing or {}).get("hooks") or {}).get(key))
        if registration.prompt_submit or (registration.prompt_submit is None and had_prompt):
            specs[key] = registration.hook_spec(event, script, self.agent)
        return hooks_config(specs)


def hook_argv(spec: HookSpec) -> list[str]:
    """A hook spec's command as the argv a plugin spawns."""
    return shlex.split(spec.command)


def hooks_config(specs: dict[str, HookSpec]) -> dict[str, Any]:
    """What a template's ENGRAM line holds of its hooks: each hook's argv and timeout (ms), by the template's name
    for it."""
    return {"hooks": {key: hook_argv(spec) for key, spec in specs.items()},
            "timeouts": {key: spec.timeout * 1000 for key, spec in specs.items()}}


def _shown(config: dict[str, Any] | None) -> str:
    """What the diff shows of a file's ENGRAM line: its commands, one a line, and its tools by name."""
    if config is None:
        return ""
    tools = config.get("tools")
    if isinstance(tools, list):
        config = {**config, "tools": [tool.get("name") for tool in tools if isinstance(tool, dict)]}
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"
