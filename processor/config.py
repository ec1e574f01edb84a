"""Engram's configuration: every setting, its type and default live in the `Settings` class body, in one place.

Precedence, lowest to highest: the defaults below, ``$ENGRAM_HOME/config.toml``
(flat ``key = value`` lines, the names below), environment variables
(``ENGRAM_`` + the upper-cased name, e.g. ``ENGRAM_RECENT_DAYS=14``), then
explicit overrides from the command line (``--projects-dir``).

Two locations are special because everything else hangs off them:
- ``ENGRAM_HOME``: the data directory, created 0700. Default: the platform's place for user data,
  ``$XDG_DATA_HOME/engram`` (``~/.local/share/engram``) on Linux, ``~/Library/Application
  Support/engram`` on macOS; but an existing ``~/.engram`` written by an earlier Engram keeps being
  used there (see ``engram_home``). ``processor/hook_kit/hook_io.py`` resolves it the same way.
- the transcripts root: ``projects_dir`` if set, else
  ``${CLAUDE_CONFIG_DIR:-~/.claude}/projects``; the other agents' folders likewise: ``codex_home`` (else
  ``$CODEX_HOME``, else ``~/.codex``) and ``gemini_home`` (else ``${GEMINI_CLI_HOME:-~}/.gemini``), where
  those CLIs keep their sessions (``processor/capture/agents.py``); ``copilot_home`` (else ``$COPILOT_HOME``,
  else ``~/.copilot``) and ``qwen_home`` (else ``$QWEN_RUNTIME_DIR``, else ``$QWEN_HOME``, else ``~/.qwen``).
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from processor.files import ensure_private_dir
from processor.hook_kit import hook_io, legacy_home

T = TypeVar("T")


class Option(Generic[T]):
    """One setting: its default, whose type is the setting's type, and what it means.

    Declared in the body of `Settings`, it reads the loaded value typed like its default
    (`settings.recent_days` is a float), so call sites never cast.
    """

    def __init__(self, default: T, help: str, *, key: str | None = None) -> None:
        self.default = default
        self.help = help
        self.name = key or ""  # the key in config.toml and ENGRAM_<KEY>; the attribute's name unless given

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.name = self.name or attribute

    @overload
    def __get__(self, obj: None, owner: type) -> Option[T]: ...
    @overload
    def __get__(self, obj: Settings, owner: type) -> T: ...
    def __get__(self, obj: Settings | None, owner: type) -> Option[T] | T:
        if obj is None:
            return self
        return obj.values[self.name]


@dataclass(frozen=True)
class Settings:
    """Loaded settings: the data home, the transcripts root, and every option's value.

    The options below are the single table of tunables: later features add rows here, never
    defaults elsewhere (the defaults of those the stdlib hooks read themselves come from their kit,
    ``processor/hook_kit/hook_io.py``).
    """

    home: Path
    transcripts_root: Path
    values: Mapping[str, Any] = field(default_factory=dict)
    # The Codex CLI's and the Gemini CLI's own folders (None: not captured, e.g. settings built by hand).
    codex_dir: Path | None = None
    gemini_dir: Path | None = None
    # The GitHub Copilot CLI's and Qwen Code's folders (None likewise).
    copilot_dir: Path | None = None
    qwen_dir: Path | None = None
    # opencode's data folder (its opencode.db) and pi's agent folder (None: not captured).
    opencode_dir: Path | None = None
    pi_dir: Path | None = None

    projects_dir = Option("", "Claude Code transcripts root; empty = ${CLAUDE_CONFIG_DIR:-~/.claude}/projects")
    codex_home = Option("", "the Codex CLI's folder (its sessions/ are captured); empty = $CODEX_HOME, else ~/.codex")
    gemini_home = Option("", "the Gemini CLI's folder (its tmp/*/chats/ are captured); empty = "
                             "${GEMINI_CLI_HOME:-~}/.gemini")
    copilot_home = Option("", "the GitHub Copilot CLI's folder (its session-state/ is captured); empty = "
                              "$COPILOT_HOME, else ~/.copilot")
    qwen_home = Option("", "Qwen Code's folder (its projects/*/chats/ are captured); empty = $QWEN_RUNTIME_DIR, "
                           "else $QWEN_HOME, else ~/.qwen")
    opencode_data = Option("", "opencode's data folder (its opencode.db is captured); empty = "
                               "$XDG_DATA_HOME/opencode, else ~/.local/share/opencode")
    pi_home = Option("", "pi's agent folder (its sessions/ are captured); empty = $PI_CODING_AGENT_DIR, else "
                         "~/.pi/agent")
    capture_agents = Option(",".join(hook_io.AGENTS), "the agents whose sessions are captured, comma-separated",
                            key="agents")
    recent_days = Option(7.0, "only transcripts modified within this many days are tailed by `engram run`")
    rescan_seconds = Option(60.0, "safety-net rescan of the transcripts root, in case a watch event was missed")
    max_line_bytes = Option(16 * 1024 * 1024, "transcript lines longer than this are skipped with a log line")
    batch_bytes = Option(4 * 1024 * 1024, "bytes of transcript consumed per store transaction")
    idle_minutes = Option(5.0, "a session quiet this long has its last round turned into an episode")
    configured_models_dir = Option(
        "",
        "folder of converted embedding models; empty = $ENGRAM_HOME/models", key="models_dir")
    embedding_model = Option(
        "default",
        "GGUF embedding model: 'default' (all-MiniLM-L6-v2, converted from its PyPI package) or a path")
    verbatim_max_chars = Option(500, "verbatim episodes hold at most about this many characters each")
    automem = Option(True, "read Claude Code's auto memory (<project>/memory/*.md) as memories; never written")
    automem_max_bytes = Option(128 * 1024, "an auto-memory file is read up to this many bytes (with a log line)")
    recall_limit = Option(5, "memories returned by memory_recall / engram recall by default")
    weight_relevance = Option(0.5, "ranking weight of relevance (BM25 + cosine)")
    weight_recency = Option(0.3, "ranking weight of recency (decay over the project's active days) × relevance")
    weight_frequency = Option(0.2, "ranking weight of use (expansions, decayed and saturating)")
    frequency_saturation = Option(3.0, "decayed uses at which the use signal reaches half of weight_frequency")
    high_importance_floor = Option(0.3, "minimum relevance of an importance=high memory that matched at all")
    recency_half_life_days = Option(30.0, "age, in active days of its project, at which a memory's recency halves")
    bm25_share = Option(0.5, "share of relevance from BM25; the rest is cosine similarity")
    supersede_similarity = Option(
        0.6, "cosine from which a newer episode that states a change about the same subject supersedes an older one")
    http_port = Option(27326, "control plane port on 127.0.0.1; if taken, the OS picks one (run/engram.port)")
    memory_warn_mb = Option(400.0, "log a warning when the processor's RSS exceeds this")
    memory_limit_mb = Option(512.0, "above this RSS the processor shuts down cleanly with exit status 75")
    memory_check_seconds = Option(30.0, "how often the memory watchdog samples RSS")
    child_grace_seconds = Option(5.0, "on shutdown, seconds between SIGTERM and SIGKILL for child processes")
    service_memory_max_mb = Option(2048, "systemd MemoryMax: hard cap for the processor plus its children")
    service_restart_seconds = Option(10, "systemd RestartSec / launchd ThrottleInterval")
    service_nice = Option(10, "systemd Nice= for the processor")
    recollection_bites = Option(hook_io.RECOLLECTION_BITES_DEFAULT,
                                "memory bites precomputed per user message for the PreToolUse hook")
    topic_gate = Option(0.85, "a user message this similar (cosine) to the previous one keeps the old bites")
    recollection_skip_recent = Option(6, "episodes from this many latest rounds of the same session are not bites")
    recollection_idle_hours = Option(1.0, "recollection files of sessions idle this long are removed")
    session_start_token_budget = Option(hook_io.SESSION_START_BUDGET_DEFAULT,
                                        "SessionStart digest size in estimated tokens (4 characters each)")
    prompt_submit_enabled = Option(False, "the UserPromptSubmit hook (engram install --prompt-submit) injects bites")
    show_injected = Option(hook_io.SHOW_INJECTED_DEFAULT,
                           "the hooks show the user one line naming the memories they injected (systemMessage)")
    prompt_submit_budget_ms = Option(hook_io.PROMPT_SUBMIT_BUDGET_MS_DEFAULT,
                                     "time limit of the UserPromptSubmit hook's request to the processor")
    extractor = Option("auto", "LLM extractor backend: auto | openai | claude | llama | verbatim (no LLM)")
    openai_base_url = Option("", "OpenAI-compatible endpoint (Ollama, LM Studio, vLLM, llama.cpp); empty = OpenAI")
    openai_model = Option("gpt-4.1-nano", "model for the openai backend")
    openai_api_key_env = Option("OPENAI_API_KEY", "environment variable holding the openai backend's API key")
    claude_model = Option("", "model for the claude backend (Claude Agent SDK); empty = the CLI's default")
    llama_model = Option("", "instruct GGUF for the llama backend (local, no API key)")
    daily_budget_usd = Option(0.5, "LLM spend per UTC day; when reached, LLM jobs pause until tomorrow")
    model_prices = Option(
        {"gpt-4.1-nano": [0.10, 0.40], "gpt-4.1-mini": [0.40, 1.60], "gpt-4o-mini": [0.15, 0.60],
         "claude-haiku-4-5": [1.00, 5.00], "claude-sonnet-4-5": [3.00, 15.00]},
        "USD per million input and output tokens, by model (a TOML table; unknown models cost 0)")
    extract_min_messages = Option(15, "an extract job is queued after this many new messages in a session")
    extract_max_minutes = Option(20.0, "…or this long after the last extraction, with at least one new message")
    extract_idle_minutes = Option(5.0, "…or when the session has been idle this long")
    llm_timeout_seconds = Option(60.0, "time limit of one LLM call")
    max_prompt_tokens = Option(12000, "an extraction prompt is cut to about this many tokens")
    max_message_chars = Option(4000, "each message in a prompt keeps its head and tail up to this many characters")
    retry_base_seconds = Option(30.0, "first retry delay of a failed job; doubles per attempt")
    retry_max_seconds = Option(3600.0, "longest retry delay")
    breaker_failures = Option(5, "consecutive backend failures that open the circuit breaker")
    breaker_cooldown_seconds = Option(300.0, "how long an open breaker pauses LLM jobs")
    cold_path = Option(True, "run the cold path: inquisitor, curator, consolidation sweeps, context check")
    max_memories_per_project = Option(5000, "active memories a project should hold; pressure = active / this")
    sweep_pressure = Option(0.7, "memory pressure above which a consolidation sweep is queued")
    sweep_interval_minutes = Option(10.0, "a project is swept (each pass) at most this often")
    duplicate_similarity = Option(0.95, "cosine from which two memories of a project are duplicates (sweep pass 1)")
    archive_after_days = Option(30.0, "verbatim pieces older than this, normal and never expanded, are archived")
    consolidate_similarity = Option(0.75, "cosine from which memories are related enough to consolidate (pass 2)")
    consolidate_batch = Option(15, "memories per pass-2 consolidation call (10-20)")
    inquisitor_recheck_hours = Option(24.0, "a memory checked at the same commit is checked again after this")
    inquisitor_min_hours = Option(1.0, "a memory checked this recently is skipped, even at another commit")
    inquisitor_batch = Option(500, "memories checked per inquisitor job")
    git_timeout_seconds = Option(10.0, "time limit of each git call the inquisitor makes")
    context_budget_tokens = Option(30000, "context memory may cost per session (digest + bites), 15% of 200k")
    context_check_hours = Option(6.0, "how often the context check measures what memory costs the agent")
    shared_database_url = Option(
        "", "shared memory: libpq URL of a PostgreSQL with pgvector (postgresql://USER@HOST:5432/DB?sslmode=verify-full);"
        " empty = off. Its password never here: PGPASSWORD in $ENGRAM_HOME/env, or ~/.pgpass")
    share_team_replicate = Option(
        True, "pull teammates' memories into the local store; false: reach them with memory_recall scope 'team' only")
    share_messages = Option(False, "also push the transcript messages shared memories were made from (own machines)")
    share_interval_seconds = Option(1.0, "the processor looks for local changes to push this often")
    share_batch = Option(500, "memories per push or pull transaction")
    share_max_memory_kb = Option(256, "a memory larger than this stays on this machine (logged once)")
    share_connect_timeout_seconds = Option(5.0, "time limit of a connection to the shared database")
    share_backoff_max_seconds = Option(60.0, "longest wait between retries while the shared database is unreachable")
    log_level = Option("INFO", "logging level for $ENGRAM_HOME/logs/engram.log")
    log_max_bytes = Option(5 * 1024 * 1024, "size at which the log file rotates")
    log_backups = Option(3, "rotated log files kept")

    @property
    def current(self) -> Settings:
        """Itself: a component given fixed settings reads them exactly as one given a SettingsHolder."""
        return self

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
        configured = self.configured_models_dir
        return Path(configured).expanduser() if configured else self.home / "models"

    @property
    def agent_workdir(self) -> Path:
        """Where Engram's own LLM jobs run; their transcripts must never be captured."""
        return self.home / "agent-work"

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"


OPTIONS: tuple[Option[Any], ...] = tuple(v for v in vars(Settings).values() if isinstance(v, Option))
_DEFAULTS: dict[str, Any] = {o.name: o.default for o in OPTIONS}


class SettingsHolder:
    """The processor's current settings, replaced whole on reload (SIGHUP).

    Every long-lived component keeps the holder, not a copy, and reads ``.current`` when it
    acts, so a reload reaches every thread at once without anyone chasing copies.
    """

    def __init__(self, settings: Settings) -> None:
        self._current = settings

    @property
    def current(self) -> Settings:
        return self._current

    def replace(self, settings: Settings) -> None:
        self._current = settings


# What a component may be given: fixed settings, or the holder that follows reloads.
SettingsSource = Settings | SettingsHolder


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file, the key and the fix."""


def claude_config_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


# The agents whose sessions Engram captures and serves, and the names they are shown by: the hooks' kit knows
# each agent's events (processor/hook_kit/hook_io.py), so the list lives there.
AGENTS = hook_io.AGENTS
AGENT_NAMES = hook_io.AGENT_NAMES


def agent_names(value: object) -> list[str]:
    """The agents a comma-separated `agents` setting names, lower-cased."""
    return [a.strip().lower() for a in str(value).split(",") if a.strip()]


def codex_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Codex CLI's home, as Codex finds it: $CODEX_HOME, else ~/.codex."""
    env = os.environ if env is None else env
    return Path(env.get("CODEX_HOME") or _user_home(env) / ".codex").expanduser()


def gemini_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Gemini CLI's folder, as Gemini finds it: $GEMINI_CLI_HOME/.gemini, else ~/.gemini."""
    env = os.environ if env is None else env
    return (Path(env.get("GEMINI_CLI_HOME") or _user_home(env)) / ".gemini").expanduser()


def copilot_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The GitHub Copilot CLI's folder, as Copilot finds it: $COPILOT_HOME, else ~/.copilot."""
    env = os.environ if env is None else env
    return Path(env.get("COPILOT_HOME") or _user_home(env) / ".copilot").expanduser()


def qwen_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Qwen Code's settings folder, as Qwen finds it: $QWEN_HOME, else ~/.qwen."""
    env = os.environ if env is None else env
    return Path(env.get("QWEN_HOME") or _user_home(env) / ".qwen").expanduser()


def qwen_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Qwen Code writes its sessions: $QWEN_RUNTIME_DIR, else its settings folder (Qwen's own
    ``advanced.runtimeOutputDir`` setting is not read: ``qwen_home`` names such a folder)."""
    env = os.environ if env is None else env
    runtime = env.get("QWEN_RUNTIME_DIR")
    return Path(runtime).expanduser() if runtime else qwen_config_dir(env)


def opencode_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """opencode's data folder, as opencode finds it (xdg-basedir, on every platform): $XDG_DATA_HOME/opencode,
    else ~/.local/share/opencode."""
    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME")
    return (Path(data) if data else _user_home(env) / ".local" / "share") / "opencode"


def pi_agent_dir(env: Mapping[str, str] | None = None) -> Path:
    """pi's agent folder, as pi finds it: $PI_CODING_AGENT_DIR, else ~/.pi/agent."""
    env = os.environ if env is None else env
    return Path(env.get("PI_CODING_AGENT_DIR") or _user_home(env) / ".pi" / "agent").expanduser()


# The name Engram is installed under (pip, importlib.metadata): "engram" on the package index is an unrelated
# project. The command (`engram`), the packages and the data paths keep Engram's own name.
DISTRIBUTION = "engram-recall"

# Engram's `PRAGMA application_id` ("Engr"), also read from the file header without SQLite (below, and by
# the stdlib hooks, whose kit holds both constants).
APPLICATION_ID = legacy_home.APPLICATION_ID
LEGACY_HOME = hook_io.LEGACY_HOME


def _user_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def platform_data_home(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """Where user data belongs on this platform: ~/Library/Application Support/engram, $XDG_DATA_HOME/engram."""
    env = os.environ if env is None else env
    home = _user_home(env)
    if (platform or sys.platform) == "darwin":
        return home / "Library" / "Application Support" / "engram"
    data = env.get("XDG_DATA_HOME") or ""
    # The XDG spec: a relative XDG_DATA_HOME is invalid and must be ignored.
    return (Path(data) if os.path.isabs(data) else home / ".local" / "share") / "engram"


def sqlite_application_id(path: Path) -> int | None:
    """The application_id in a SQLite file's header (bytes 68-71); None when it is missing or not SQLite."""
    return legacy_home.sqlite_application_id(str(path))


def is_earlier_engram_home(folder: Path) -> bool:
    """Whether ``folder`` (``~/.engram``) was written by an earlier Engram, never by another program (the rule
    the hooks apply too: ``processor/hook_kit/legacy_home.py``)."""
    return legacy_home.is_earlier_engram_home(str(folder))


def home_origin(env: Mapping[str, str] | None = None, platform: str | None = None) -> tuple[Path, str]:
    """The data home and why it is that one: 'ENGRAM_HOME', 'platform default' or 'earlier Engram home'.

    An earlier Engram's ``~/.engram`` is used where it is, not moved: a running processor, service units
    naming it and the hooks of open sessions would otherwise split the memory in two. It is used only
    while the platform's folder does not exist; another program's ``~/.engram`` is never touched.
    """
    env = os.environ if env is None else env
    configured = env.get("ENGRAM_HOME")
    if configured:
        return Path(configured).expanduser(), "ENGRAM_HOME"
    default = platform_data_home(env, platform)
    legacy = _user_home(env) / LEGACY_HOME
    if not default.exists() and is_earlier_engram_home(legacy):
        return legacy, "earlier Engram home"
    return default, "platform default"


def engram_home(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    return home_origin(env, platform)[0]


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
    unknown = [a for a in agent_names(values["agents"]) if a not in AGENTS]
    if unknown:
        raise ConfigError(f"agents = {values['agents']!r}: unknown agent(s) {', '.join(unknown)}; known: "
                          f"{', '.join(AGENTS)} (config.toml or ENGRAM_AGENTS)")
    configured = str(values.get("projects_dir") or "")
    root = Path(configured).expanduser() if configured else claude_config_dir(env) / "projects"
    codex = Path(str(values["codex_home"])).expanduser() if values.get("codex_home") else codex_config_dir(env)
    gemini = Path(str(values["gemini_home"])).expanduser() if values.get("gemini_home") else gemini_config_dir(env)
    copilot = Path(str(values["copilot_home"])).expanduser() if values.get("copilot_home") else copilot_config_dir(env)
    qwen = Path(str(values["qwen_home"])).expanduser() if values.get("qwen_home") else qwen_runtime_dir(env)
    opencode = (Path(str(values["opencode_data"])).expanduser() if values.get("opencode_data")
                else opencode_data_dir(env))
    pi = Path(str(values["pi_home"])).expanduser() if values.get("pi_home") else pi_agent_dir(env)
    return Settings(home=home, transcripts_root=Path(os.path.abspath(root)), values=values,
                    codex_dir=Path(os.path.abspath(codex)), gemini_dir=Path(os.path.abspath(gemini)),
                    copilot_dir=Path(os.path.abspath(copilot)), qwen_dir=Path(os.path.abspath(qwen)),
                    opencode_dir=Path(os.path.abspath(opencode)), pi_dir=Path(os.path.abspath(pi)))


def ensure_home(settings: Settings) -> Path:
    """Create the data home and its folders, private (0700); called once when a command starts."""
    ensure_private_dir(settings.home)
    for sub in (settings.logs_dir, settings.run_dir, settings.recollections_dir, settings.queue_dir):
        ensure_private_dir(sub)
    return settings.home
