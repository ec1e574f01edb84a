"""`engram install` / `engram uninstall` across agents: which agents are on this machine, and the registration
with each (Claude Code: ``claude``, the Codex CLI: ``codex``, the Gemini CLI:
``gemini``).

By default install registers with every agent found here — its folder exists (``~/.claude``, ``~/.claude.json``,
``$CODEX_HOME`` or ``~/.codex``, ``~/.gemini``) or its command is on PATH — and, when none is found, with
Claude Code. Uninstall by default removes Engram from every agent (a file holding nothing of Engram's is left
alone, a missing one is not created). One agent's unreadable settings file is that agent's error, with its
fix; the others are still registered.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from processor.config import AGENT_NAMES, AGENTS, claude_config_dir, codex_config_dir, gemini_config_dir
from processor.install import claude as claude
from processor.install import codex as codex
from processor.install import gemini as gemini
from processor.install.claude import ChangeReport, InstallError, Registration, check_registration

COMMANDS = {"claude": "claude", "codex": "codex", "gemini": "gemini"}


def found_agents(env: Mapping[str, str] | None = None) -> list[str]:
    """The agents installed here: their folder exists or their command is on PATH (Claude Code when none is)."""
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    claude_dir = claude_config_dir(env) if env.get("CLAUDE_CONFIG_DIR") else os.path.join(home, ".claude")
    folders = {"claude": [claude_dir, os.path.join(home, ".claude.json")],
               "codex": [codex_config_dir(env)], "gemini": [gemini_config_dir(env)]}
    found = [agent for agent in AGENTS
             if any(os.path.exists(f) for f in folders[agent]) or shutil.which(COMMANDS[agent], path=env.get("PATH"))]
    return found or ["claude"]


def chosen(agent: str | None, env: Mapping[str, str] | None = None, *, uninstall: bool = False) -> list[str]:
    """The agents `--agent` names: one, `all`, or (none given) those found here — every agent for uninstall."""
    if agent in (None, ""):
        return list(AGENTS) if uninstall else found_agents(env)
    if agent == "all":
        return list(AGENTS)
    if agent not in AGENTS:
        raise InstallError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)} or all")
    return [agent]


@dataclass(frozen=True)
class Outcome:
    """One agent's report, or the error that left its files untouched."""

    agent: str
    report: ChangeReport | None = None
    error: str | None = None

    def describe(self) -> str:
        title = f"== {AGENT_NAMES[self.agent]}"
        if self.error is not None:
            return f"{title}: not changed: {self.error}\n"
        assert self.report is not None
        return f"{title}\n{self.report.describe()}"


def install(agents: list[str], registration: Registration, *, dry_run: bool = False, check: bool = True,
            trust: bool = True, env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Register Engram with each agent; the registration is checked once (a broken one registers nowhere)."""
    if check:
        check_registration(registration)
    outcomes = []
    for agent in agents:
        try:
            if agent == "claude":
                report = claude.install(registration=registration, dry_run=dry_run, check=check)
            elif agent == "codex":
                report = codex.install(registration=registration, dry_run=dry_run, check=False, trust=trust, env=env)
            else:
                report = gemini.install(registration=registration, dry_run=dry_run, check=False, env=env)
        except InstallError as exc:
            outcomes.append(Outcome(agent, error=str(exc)))
        else:
            outcomes.append(Outcome(agent, report))
    return outcomes


def uninstall(agents: list[str], *, dry_run: bool = False, env: Mapping[str, str] | None = None) -> list[Outcome]:
    outcomes = []
    for agent in agents:
        try:
            if agent == "claude":
                report = claude.uninstall(dry_run=dry_run)
            elif agent == "codex":
                report = codex.uninstall(dry_run=dry_run, env=env)
            else:
                report = gemini.uninstall(dry_run=dry_run, env=env)
        except InstallError as exc:
            outcomes.append(Outcome(agent, error=str(exc)))
        else:
            outcomes.append(Outcome(agent, report))
    return outcomes
