"""Engram's configuration: every default lives in OPTIONS, in this one place.

Precedence, lowest to highest: the defaults below, ``$ENGRAM_HOME/config.toml``
(flat ``key = value`` lines, the names below), environment variables
(``ENGRAM_`` + the upper-cased name, e.g. ``ENGRAM_RECENT_DAYS=14``), then
explicit overrides from the command line (``--projects-dir``).

Two locations are special because everything else hangs off them:
- ``ENGRAM_HOME`` (default ``~/.engram``): the data directory, created 0700.
- the transcripts root: ``projects_dir`` if set, else
  ``${CLAUDE_CONFIG_DIR:-~/.claude}/projects``.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str


# The single table of tunables. Later features add rows here, never defaults elsewhere.
OPTIONS: tuple[Option, ...] = (
    Option("projects_dir", "", "Claude Code transcripts root; empty = ${CLAUDE_CONFIG_DIR:-~/.claude}/projects"),
    Option("recent_days", 7.0, "only transcripts modified within this many days are tailed by `engram run`"),
    Option("rescan_seconds", 60.0, "safety-net rescan of the transcripts root, in case a watch event was missed"),
    Option("max_line_bytes", 16 * 1024 * 1024, "transcript lines longer than this are skipped with a log line"),
    Option("batch_bytes", 4 * 1024 * 1024, "bytes of transcript consumed per store transaction"),
    Option("idle_minutes", 5.0, "a session quiet this long has its last round turned into an episode"),
    Option("models_dir", "", "folder of converted embedding models; empty = $ENGRAM_HOME/models"),
    Option("embedding_model", "default",
           "GGUF embedding model: 'default' (all-MiniLM-L6-v2, converted from its PyPI package) or a path"),
    Option("verbatim_max_chars", 500, "verbatim episodes hold at most about this many characters each"),
    Option("recall_limit", 5, "memories returned by memory_recall / engram recall by default"),
    Option("weight_relevance", 0.5, "ranking weight of relevance (BM25 + cosine)"),
    Option("weight_recency", 0.3, "ranking weight of recency (exponential decay)"),
    Option("weight_frequency", 0.2, "ranking weight of access frequency"),
    Option("high_importance_floor", 0.3, "minimum relevance of an importance=high memory that matched at all"),
    Option("recency_half_life_days", 30.0, "age at which a memory's recency score halves"),
    Option("bm25_share", 0.5, "share of relevance from BM25; the rest is cosine similarity"),
    Option("http_port", 27326, "control plane port on 127.0.0.1; if taken, the OS picks one (run/engram.port)"),
    Option("memory_warn_mb", 400.0, "log a warning when the processor's RSS exceeds this"),
    Option("memory_limit_mb", 512.0, "above this RSS the processor shuts down cleanly with exit status 75"),
    Option("memory_check_seconds", 30.0, "how often the memory watchdog samples RSS"),
    Option("child_grace_seconds", 5.0, "on shutdown, seconds between SIGTERM and SIGKILL for child processes"),
    Option("service_memory_max_mb", 2048, "systemd MemoryMax: hard cap for the processor plus its children"),
    Option("service_restart_seconds", 10, "systemd RestartSec / launchd ThrottleInterval"),
    Option("service_nice", 10, "systemd Nice= for the processor"),
    Option("recollection_bites", 3, "memory bites precomputed per user message for the PreToolUse hook"),
    Option("recollection_min_relevance", 0.15, "bites below this relevance are not shown"),
    Option("topic_gate", 0.85, "a user message this similar (cosine) to the previous one keeps the old bites"),
    Option("recollection_skip_recent", 6, "episodes from this many latest rounds of the same session are not bites"),
    Option("recollection_idle_hours", 1.0, "recollection files of sessions idle this long are removed"),
    Option("session_start_token_budget", 1500, "SessionStart digest size in estimated tokens (4 characters each)"),
    Option("prompt_submit_enabled", False, "the UserPromptSubmit hook (engram install --prompt-submit) injects bites"),
    Option("prompt_submit_budget_ms", 150, "time limit of the UserPromptSubmit hook's request to the processor"),
    Option("extractor", "auto", "LLM extractor backend: auto | openai | claude | llama | verbatim (no LLM)"),
    Option("openai_base_url", "", "OpenAI-compatible endpoint (Ollama, LM Studio, vLLM, llama.cpp); empty = OpenAI"),
    Option("openai_model", "gpt-4.1-nano", "model for the openai backend"),
    Option("openai_api_key_env", "OPENAI_API_KEY", "environment variable holding the openai backend's API key"),
    Option("claude_model", "", "model for the claude backend (Claude Agent SDK); empty = the CLI's default"),
    Option("llama_model", "", "instruct GGUF for the llama backend (local, no API key)"),
    Option("daily_budget_usd", 0.50, "LLM spend per UTC day; when reached, LLM jobs pause until tomorrow"),
    Option("model_prices", {"gpt-4.1-nano": [0.10, 0.40], "gpt-4.1-mini": [0.40, 1.60], "gpt-4o-mini": [0.15, 0.60],
                            "claude-haiku-4-5": [1.00, 5.00], "claude-sonnet-4-5": [3.00, 15.00]},
           "USD per million input and output tokens, by model (a TOML table; unknown models cost 0)"),
    Option("extract_min_messages", 15, "an extract job is queued after this many new messages in a session"),
    Option("extract_max_minutes", 20.0, "…or this long after the last extraction, with at least one new message"),
    Option("extract_idle_minutes", 5.0, "…or when the session has been idle this long"),
    Option("llm_timeout_seconds", 60.0, "time limit of one LLM call"),
    Option("max_prompt_tokens", 12000, "an extraction prompt is cut to about this many tokens"),
    Option("max_message_chars", 4000, "each message in a prompt keeps its head and tail up to this many characters"),
    Option("retry_base_seconds", 30.0, "first retry delay of a failed job; doubles per attempt"),
    Option("retry_max_seconds", 3600.0, "longest retry delay"),
    Option("breaker_failures", 5, "consecutive backend failures that open the circuit breaker"),
    Option("breaker_cooldown_seconds", 300.0, "how long an open breaker pauses LLM jobs"),
    Option("log_level", "INFO", "logging level for ~/.engram/logs/engram.log"),
    Option("log_max_bytes", 5 * 1024 * 1024, "size at which the log file rotates"),
    Option("log_backups", 3, "rotated log files kept"),
)

_DEFAULTS: dict[str, Any] = {o.name: o.default for o in OPTIONS}


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Settings:
    home: Path
    transcripts_root: Path
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # Dataclass fields are found normally; this is only reached for option names.
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        raise AttributeError(f"no Engram setting named {name!r}")

    # Locations under the data home: one place that names them.
    @property
    def db_path(self) -> Path:
        return self.home / "engram.db"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def recollections_dir(self) -> Path:
        return self.home / "recollections"

    @property
    def queue_dir(self) -> Path:
        return self.home / "queue"

    @property
    def models_dir(self) -> Path:
        configured = str(self.values.get("models_dir") or "")
        return Path(configured).expanduser() if configured else self.home / "models"

    @property
    def agent_workdir(self) -> Path:
        """Where Engram's own LLM jobs run; their transcripts must never be captured."""
        return self.home / "agent-work"

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"



def claude_config_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


def engram_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("ENGRAM_HOME") or Path.home() / ".engram").expanduser()


def _coerce(name: str, raw: Any, source: str) -> Any:
    default = _DEFAULTS[name]
    try:
        if isinstance(default, dict):
            value = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        kind = type(default).__name__
        raise ConfigError(f"{source}: {name} = {raw!r} is not a valid {kind} (default {default!r})") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse config.toml; a syntax error names the line so the user can fix it."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc} — fix the file or move it aside") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    unknown = sorted(set(data) - set(_DEFAULTS))
    if unknown:
        known = ", ".join(sorted(_DEFAULTS))
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}; known settings: {known}")
    return {k: _coerce(k, v, str(path)) for k, v in data.items()}


def load_settings(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    env = os.environ if env is None else env
    home = engram_home(env)
    values = dict(_DEFAULTS)
    values.update(read_config_file(home / "config.toml"))
    for name in _DEFAULTS:
        raw = env.get("ENGRAM_" + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce(name, raw, "ENGRAM_" + name.upper())
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, "--" + name.replace("_", "-"))
    configured = str(values.get("projects_dir") or "")
    root = Path(configured).expanduser() if configured else claude_config_dir(env) / "projects"
    return Settings(home=home, transcripts_root=Path(os.path.abspath(root)), values=values)


def ensure_private_dir(path: Path) -> Path:
    """Create a directory readable by the owner only (0700) and fix a looser existing one."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def ensure_home(settings: Settings) -> Path:
    ensure_private_dir(settings.home)
    for sub in (settings.logs_dir, settings.run_dir, settings.recollections_dir, settings.queue_dir):
        ensure_private_dir(sub)
    return settings.home
