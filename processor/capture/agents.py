"""Which agents' transcripts are captured, and where each keeps them: one format per agent, in one table.

Claude Code's under ``projects_dir`` (``claude``), the Codex CLI's under ``<codex home>/sessions`` (``codex``),
the Gemini CLI's under ``<gemini dir>/tmp`` (``gemini``), the GitHub Copilot CLI's under
``<copilot home>/session-state`` (``copilot``), Qwen Code's under ``<qwen dir>/projects`` (``qwen``), opencode's
in ``<data dir>/opencode.db`` (``opencode``: one SQLite file holds every session), pi's under
``<agent dir>/sessions`` (``pi``); the ``agents`` setting names the ones captured (all of them by default).
Engram's own LLM jobs run in its agent work directory, and no agent's session from there is captured. Adding an
agent is a module holding its ``TranscriptFormat``, and one line in ``FORMATS``.
"""

from __future__ import annotations

from pathlib import Path

from processor.capture.claude import ClaudeFormat
from processor.capture.codex import CodexFormat
from processor.capture.copilot import CopilotFormat
from processor.capture.formats import CLAUDE, CODEX, COPILOT, GEMINI, OPENCODE, PI, QWEN, TranscriptFormat
from processor.capture.gemini import GeminiFormat
from processor.capture.opencode import OpencodeFormat
from processor.capture.pi import PiFormat
from processor.capture.qwen import QwenFormat
from processor.config import AGENTS, Settings, agent_names

FORMATS: dict[str, type[TranscriptFormat]] = {CLAUDE: ClaudeFormat, CODEX: CodexFormat, GEMINI: GeminiFormat,
                                              COPILOT: CopilotFormat, QWEN: QwenFormat}
FORMATS[OPENCODE] = OpencodeFormat
FORMATS[PI] = PiFormat


def captured_agents(settings: Settings) -> tuple[str, ...]:
    """The agents named by the ``agents`` setting (load_settings refused unknown names), in Engram's order."""
    named = agent_names(settings.capture_agents)
    return tuple(a for a in AGENTS if a in named)


def transcript_formats(settings: Settings) -> list[TranscriptFormat]:
    """Every captured agent's transcripts that the settings know a folder for, Claude Code's first."""
    formats = (FORMATS[agent].from_settings(settings) for agent in captured_agents(settings))
    return [fmt for fmt in formats if fmt is not None]


def layout_format(path: Path) -> TranscriptFormat | None:
    """For a file under no captured agent's root (a test's transcript, a benchmark's copy): the format of the agent
    whose session layout its name and folders have, rooted where that layout puts the root. Of several, the one
    whose layout explains the most folders (a Codex rollout's ``YYYY/MM/DD/`` would also pass for a Claude Code
    project folder); None when no agent's layout fits."""
    fitting = [fmt for format_type in FORMATS.values() if (fmt := format_type.at(path)) is not None]
    return max(fitting, key=lambda fmt: fmt.depth, default=None)
