"""`engram doctor`: check every part Engram depends on and say how to fix what is wrong.

``run_checks()`` returns one ``Check`` per thing looked at, in a fixed order; ``format_report()``
renders them as ``✓``/``✗``/``!`` lines with the fix under each problem; ``exit_code()`` is 0 when
no check failed with severity "error" (warnings, such as "the processor is not running", are shown
but do not fail the run). The CLI is only ``print(format_report(checks)); return exit_code(checks)``.

Every check is independent: an exception inside one is reported as that check's ✗ and the others
still run. What is checked of each agent's registration is that agent's module's to say (``problems``
in processor/install/); doctor only runs it. Doctor never changes anything (the database is opened
read-only, the default model is not converted, llama.cpp is not loaded, no service manager is called),
so it is fast and safe to run at any time, including while the processor runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import plistlib
import re
import shlex
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from processor.check import Check, error, passed, shown_path, warning
from processor.config import (
    APPLICATION_ID,
    LEGACY_HOME,
    OPTIONS,
    ConfigError,
    Settings,
    claude_config_dir,
    engram_home,
    home_origin,
    is_earlier_engram_home,
    load_settings,
    platform_data_home,
)
from processor.install.agents import AGENTS, Agent
from processor.install.registration import missing_programs
from processor.jobs.costs import today_spend

# Free space on the data directory's filesystem: below these, SQLite writes start failing.
DISK_ERROR_BYTES = 100 * 1024 * 1024
DISK_WARNING_BYTES = 1024 * 1024 * 1024
# Share of the daily LLM budget at which doctor starts warning.
BUDGET_WARNING_SHARE = 0.8
PING_TIMEOUT_SECONDS = 0.5

# Files under the data directory that must be private: the conversations, the control token, API keys.
_PRIVATE_FILES = ("engram.db", "engram.db-wal", "engram.db-shm", "run/token", "env")


# --------------------------------------------------------------------------- shared state


@dataclass
class _Probe:
    """What the checks share: the environment, usable settings, and the database once opened."""

    env: Mapping[str, str]
    settings: Settings
    config_error: ConfigError | None = None
    db: apsw.Connection | None = None  # set by the database check when the file is readable and sound
    model_id: str | None = None  # the configured embedding model's id, as stored in meta
    model_dim: int | None = None  # its vector size, read from the GGUF header when available

    def show(self, path: Path) -> str:
        """A path as the user would type it: ~ for their home directory."""
        return shown_path(path, self.env)


def _load_probe(env: Mapping[str, str]) -> _Probe:
    """Settings for the checks; with a broken config, the defaults (plus env), so the rest still runs."""
    try:
        return _Probe(env, load_settings(env=env))
    except ConfigError as exc:
        config_error = exc
    home = engram_home(env)
    try:
        # Same precedence minus the broken file: load from an empty home, then put the real home back.
        with tempfile.TemporaryDirectory(prefix="engram-doctor-") as empty:
            settings = dataclasses.replace(load_settings(env={**env, "ENGRAM_HOME": empty}), home=home)
    except ConfigError:
        # The environment itself is broken too: pure defaults.
        settings = Settings(home=home, transcripts_root=claude_config_dir(env) / "projects",
                            values={o.name: o.default for o in OPTIONS})
    return _Probe(env, settings, config_error=config_error)


@contextlib.contextmanager
def _quiet_sqlite_log() -> Iterator[None]:
    # apsw forwards SQLite's own log (e.g. "database corruption at line ...") to logging at ERROR;
    # doctor reports the problem itself, so those lines would only clutter the terminal.
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


# --------------------------------------------------------------------------- config


def check_config(probe: _Probe) -> Check:
    path = probe.settings.config_path
    config_error = probe.config_error
    if config_error is None:
        if not path.exists():
            return passed("config", f"no {probe.show(path)}; using the defaults")
        return passed("config", f"{probe.show(path)} is valid")
    message = str(config_error).split("; known settings:")[0]  # that list is long; `engram` --help has it
    detail = f"{message} (the other checks use the defaults)"
    source = str(config_error).split(":", 1)[0]
    if source.startswith("ENGRAM_"):
        return error("config", detail, f"fix or unset ${source}")
    if source.startswith("--"):
        return error("config", detail, f"fix the {source} option")
    line = _config_error_line(config_error, path)
    where = f"{probe.show(path)} line {line}" if line else probe.show(path)
    return error("config", detail, f"fix {where}, or move it aside: mv {probe.show(path)} {probe.show(path)}.broken")


def _config_error_line(error: ConfigError, path: Path) -> int | None:
    """The config.toml line the error is about: TOML's own line number, or the line setting the key."""
    text = str(error)
    found = re.search(r"at line (\d+)", text)
    if found:
        return int(found.group(1))
    key = re.search(r": (\w+) = ", text) or re.search(r"unknown setting\(s\) (\w+)", text)
    if not key:
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    pattern = re.compile(rf"\s*[\"']?{re.escape(key.group(1))}[\"']?\s*=")
    return next((n for n, line in enumerate(lines, 1) if pattern.match(line)), None)


# --------------------------------------------------------------------------- data directory


def check_permissions(probe: _Probe) -> Check:
    name = "data directory"
    home = probe.settings.home
    shown = probe.show(home)
    try:
        st = os.stat(home)
    except FileNotFoundError:
        return warning(name, f"{shown} does not exist yet", "engram run (or engram backfill) creates it")
    if not stat.S_ISDIR(st.st_mode):
        return error(name, f"{shown} is not a directory", f"move it aside: mv {shown} {shown}.old")
    uid = os.getuid()
    if st.st_uid != uid:
        return error(name, f"{shown} is owned by uid {st.st_uid}, not you (uid {uid})", f"sudo chown -R {uid} {shown}")
    problems: list[str] = []
    fixes: list[str] = []
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        problems.append(f"{shown} is mode {mode:o}: other users can read your conversations")
        fixes.append(f"chmod 700 {shown}")
    loose: list[str] = []
    for relative in _PRIVATE_FILES:
        path = home / relative
        try:
            fst = os.lstat(path)
        except FileNotFoundError:
            continue
        if fst.st_uid != uid:
            problems.append(f"{probe.show(path)} is owned by uid {fst.st_uid}")
            fixes.append(f"sudo chown {uid} {probe.show(path)}")
        elif stat.S_IMODE(fst.st_mode) & 0o077:
            problems.append(f"{probe.show(path)} is mode {stat.S_IMODE(fst.st_mode):o}")
            loose.append(probe.show(path))
    if loose:
        fixes.append("chmod 600 " + " ".join(loose))
    if problems:
        return error(name, "; ".join(problems), "; ".join(fixes))
    return passed(name, f"{shown} is private (700, yours)")


# --------------------------------------------------------------------------- database


def check_database(probe: _Probe) -> Check:
    name = "database"
    path = probe.settings.db_path
    shown = probe.show(path)
    if not path.exists():
        return warning(name, f"{shown} does not exist: nothing captured yet",
                        "engram backfill (imports past transcripts) or engram run")
    from processor.store.connection import NotEngramDatabase, connect, database_identity

    move_aside = (f"move it aside: mv {shown} {shown}.broken; "
                  "engram backfill rebuilds it from transcripts")
    conn = None
    try:
        with _quiet_sqlite_log():
            conn = connect(path, readonly=True)
            rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
            identity = database_identity(conn)
    except NotEngramDatabase as exc:
        if "not a SQLite database" in str(exc):  # bytes that are no database at all: damaged, not foreign
            return error(name, f"{shown} is damaged ({str(exc).split('(', 1)[-1].split(')')[0]})", move_aside)
        return error(name, f"{shown} belongs to another program: {str(exc).split('; another program')[0]}",
                      "set ENGRAM_HOME to a folder of Engram's own (or unset it for the default, "
                      f"{probe.show(platform_data_home(probe.env))}); leave the other program's file alone")
    except apsw.Error as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, apsw.BusyError):
            return warning(name, f"{shown} stayed locked by another process; could not check it",
                            "run engram doctor again in a moment")
        if isinstance(exc, apsw.NotADBError | apsw.CorruptError):
            return error(name, f"{shown} is damaged ({exc})", move_aside)
        return error(name, f"cannot read {shown} ({type(exc).__name__}: {exc})",
                      f"check that it is yours and readable: ls -l {shown}")
    if rows != ["ok"]:
        conn.close()
        shown_rows = "; ".join(r.replace("\n", " ") for r in rows[:3])
        return error(name, f"{shown} failed its integrity check: {shown_rows}", move_aside)
    probe.db = conn
    size_mb = path.stat().st_size / (1024 * 1024)
    if identity == "earlier-engram":
        return warning(name, f"{shown} ({size_mb:.1f} MB) passed its integrity check; it is an Engram database "
                        f"from before Engram's application_id ({APPLICATION_ID:#x})",
                        "engram run (or any engram command that writes) stamps it")
    return passed(name, f"{shown} ({size_mb:.1f} MB) passed its integrity check; application_id "
               f"{APPLICATION_ID:#x} (Engram's)")


def check_home(probe: _Probe) -> Check:
    """Where the data home is and why; a ~/.engram that another program owns is named, and left alone."""
    name = "data home"
    home, origin = home_origin(probe.env)
    if probe.settings.home != home:  # a broken config kept the home: same rule, nothing to add
        home, origin = probe.settings.home, "ENGRAM_HOME"
    legacy = Path(probe.env.get("HOME") or Path.home()) / LEGACY_HOME
    note = ""
    if legacy != home and legacy.exists() and not is_earlier_engram_home(legacy):
        note = f"; {probe.show(legacy)} belongs to another program and is not used"
    elif legacy != home and is_earlier_engram_home(legacy):
        return warning(name, f"{probe.show(home)} ({origin}); an earlier Engram's {probe.show(legacy)} is not used",
                        f"to keep its memories, stop the processor and move it: mv {probe.show(legacy)} "
                        f"{probe.show(home)} (when {probe.show(home)} is new and empty)")
    why = {"ENGRAM_HOME": "set by ENGRAM_HOME", "platform default": "the platform's default",
           "earlier Engram home": "an earlier Engram's home, used where it is"}[origin]
    return passed(name, f"{probe.show(home)} ({why}){note}")


def _tables(conn: apsw.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def check_schema(probe: _Probe) -> Check | None:
    if probe.db is None:
        return None  # the database check already said why
    from processor.store.migrations import MIGRATIONS

    name = "schema"
    known = [m.__name__ for m in MIGRATIONS]
    applied: list[str] = []
    if "schema_migrations" in _tables(probe.db):
        applied = [r[0] for r in probe.db.execute("SELECT name FROM schema_migrations ORDER BY rowid")]
    unknown = [n for n in applied if n not in known]
    if unknown:
        return error(name, f"this database was written by a newer Engram (unknown migrations: {', '.join(unknown)})",
                      "upgrade Engram (git pull && pip install -e .), or move the database aside and "
                      "run engram backfill")
    missing = [n for n in known if n not in applied]
    if missing:
        return warning(name, f"schema version {len(applied)} of {len(known)}; pending: {', '.join(missing)}",
                        "engram run (migrates automatically)")
    return passed(name, f"schema version {len(applied)} (latest: {known[-1]})")


# --------------------------------------------------------------------------- embedding model


def check_model(probe: _Probe) -> Check:
    from processor.memory import gguf_convert as gc

    name = "embedding model"
    configured = str(probe.settings.embedding_model or "")
    models_dir = probe.settings.models_dir
    if configured in ("", "default", gc.MODEL_NAME):
        probe.model_id = gc.MODEL_NAME
        dest = models_dir / gc.GGUF_FILENAME
        try:
            gc.find_model_zip()
            zip_problem = None
        except gc.ConversionError as exc:
            zip_problem = str(exc)
        gguf_problem = None
        if not dest.is_file():
            gguf_problem = f"{probe.show(dest)} is not converted yet"
        else:
            try:
                meta = gc.read_gguf_metadata(dest)
            except (OSError, ValueError) as exc:
                gguf_problem = f"{probe.show(dest)} is damaged ({exc})"
            else:
                probe.model_dim = _embedding_length(meta)
                if meta.get(gc.VERSION_KEY) != gc.CONVERTER_VERSION:
                    gguf_problem = f"{probe.show(dest)} was made by an older converter"
        if gguf_problem and zip_problem:
            return error(name, f"{gguf_problem}, and {zip_problem}", gc.INSTALL_HINT)
        if gguf_problem:
            # The embedder converts it on first use; only the first start is slower.
            return warning(name, f"{gguf_problem}; Engram converts it from the model package on first use",
                            "none needed: the first `engram run` converts it")
        if zip_problem:
            return warning(name, f"{probe.show(dest)} is fine, but {zip_problem}",
                            f"{gc.INSTALL_HINT} (needed to convert it again)")
        return passed(name, f"{gc.MODEL_NAME} ({probe.show(dest)})")

    from processor.memory.embedder import _resolve_model_path
    from processor.memory.errors import EmbedderError

    probe.model_id = Path(configured).name
    use_default = 'or set embedding_model = "default" in config.toml'
    try:
        path = _resolve_model_path(Path(configured).expanduser(), models_dir)
    except EmbedderError:
        looked = [Path(configured).expanduser()]
        if not looked[0].is_absolute():
            looked.append(models_dir / configured)
        shown_looked = " or ".join(probe.show(p) for p in looked)
        return error(name, f"configured model {configured} not found (no {shown_looked})",
                      f"put a GGUF embedding model at {configured}, {use_default}")
    try:
        meta = gc.read_gguf_metadata(path)
    except (OSError, ValueError) as exc:
        return error(name, f"{probe.show(path)} is not a usable GGUF file ({exc})",
                      f"replace it with a complete GGUF embedding model, {use_default}")
    if not meta.get("general.architecture"):
        return error(name, f"{probe.show(path)} has no general.architecture",
                      f"use a GGUF embedding model, {use_default}")
    probe.model_dim = _embedding_length(meta)
    return passed(name, f"{probe.show(path)} ({meta['general.architecture']})")


def _embedding_length(meta: Mapping[str, Any]) -> int | None:
    value = meta.get(f"{meta.get('general.architecture', '')}.embedding_length")
    return int(value) if isinstance(value, int) else None


def check_vectors(probe: _Probe) -> Check | None:
    if probe.db is None or probe.model_id is None:
        return None
    name = "stored vectors"
    if "meta" not in _tables(probe.db):
        return passed(name, "no vectors stored yet")
    meta = dict(probe.db.execute("SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"))
    stored = meta.get("embedding_model")
    if stored is None:
        return passed(name, "no vectors stored yet")
    stored_dim = int(meta["embedding_dim"]) if str(meta.get("embedding_dim", "")).isdigit() else None
    dim_differs = None not in (stored_dim, probe.model_dim) and stored_dim != probe.model_dim
    if stored != probe.model_id or dim_differs:
        return error(name, f"stored vectors were made by {stored} ({stored_dim} dims), but the configured model is "
                      f"{probe.model_id} ({probe.model_dim} dims)",
                      f"engram reindex (re-embeds every episode), or set embedding_model back to {stored}")
    return passed(name, f"made by {stored}, the configured model")


# --------------------------------------------------------------------------- agents


def _registration_checks(agent: Agent) -> Callable[[_Probe], list[Check]]:
    """What `agent`'s own module finds of Engram's registration with it."""
    return lambda probe: agent.problems(probe.settings, probe.env)


# --------------------------------------------------------------------------- service and processor


def check_service(probe: _Probe) -> Check:
    from processor.service import units

    name = "service"
    try:
        platform = units.detect_platform()
    except units.ServiceError as exc:
        return warning(name, str(exc), "run engram run under your own supervisor")
    path = units.unit_path(platform, probe.env)
    shown = probe.show(path)
    if not path.exists():
        return warning(name, f"not installed ({shown} does not exist); Engram runs only while `engram run` does",
                        "engram service install")
    text = path.read_text(encoding="utf-8")
    if platform == "launchd":
        plist = plistlib.loads(text.encode("utf-8"))
        argv = [str(a) for a in plist.get("ProgramArguments", [])]
        service_home = (plist.get("EnvironmentVariables") or {}).get("ENGRAM_HOME")
    else:
        service = units.parse_unit(text).get("Service", {})
        argv = shlex.split(service.get("ExecStart", [""])[-1].replace("%%", "%"))
        assignments = [item.replace("%%", "%") for line in service.get("Environment", []) for item in shlex.split(line)]
        service_home = next((a.split("=", 1)[1] for a in assignments if a.startswith("ENGRAM_HOME=")), None)
    gone = missing_programs(argv[:1])
    if not argv or gone:
        return error(name, f"{shown} runs {argv[0] if argv else 'nothing'}, which is gone",
                      "engram service install (rewrites it for this interpreter)")
    if service_home and Path(service_home) != probe.settings.home:
        return warning(name, f"{shown} serves ENGRAM_HOME={service_home}, not {probe.show(probe.settings.home)}",
                        "engram service install (from the environment with the right ENGRAM_HOME)")
    return passed(name, f"installed ({shown})")


def check_processor(probe: _Probe) -> Check:
    from processor.service.control_client import ping
    from processor.service.control_files import read_port
    from processor.service.pidfile import is_running, read_record

    name = "processor"
    run_dir = probe.settings.run_dir
    degraded = "hooks and MCP still answer from the database, but nothing new is captured"
    start = "engram service install (or engram run in a terminal)"
    if not is_running(run_dir):
        record = read_record(run_dir)
        if record is not None:
            return warning(name, f"not running; stale pid file from pid {record.pid} ({degraded})", start)
        return warning(name, f"not running ({degraded})", start)
    answer = ping(run_dir, timeout=PING_TIMEOUT_SECONDS)
    record = read_record(run_dir)
    pid = f"pid {record.pid}" if record else "pid unknown"
    if answer is None:
        return error(name, f"running ({pid}) but not answering on port {read_port(run_dir)}",
                      "check engram service logs; restart it: engram service restart")
    facts = [pid]
    if isinstance(answer.get("uptime_seconds"), int | float):
        facts.append(f"up {_duration(float(answer['uptime_seconds']))}")
    if answer.get("queue_depth") is not None:
        facts.append(f"queue {answer['queue_depth']}")
    tools = answer.get("mcp_tools")
    if isinstance(tools, str) and tools.startswith("unavailable"):
        return warning(name, f"running ({', '.join(facts)}), but its MCP tools are {tools}: each Claude Code "
                        "session starts a server of its own (over a second to start)",
                        "see the engram log; restart it: engram service restart")
    if isinstance(tools, str):
        facts.append(f"MCP tools {tools}")
    return passed(name, f"running ({', '.join(facts)})")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# --------------------------------------------------------------------------- resources


def check_disk(probe: _Probe) -> Check:
    name = "disk space"
    where = probe.settings.home
    while not where.exists() and where != where.parent:
        where = where.parent  # the home may not exist yet: measure the filesystem it will be on
    free = shutil.disk_usage(where).free
    text = f"{free / 1024 ** 3:.1f} GB free on the filesystem of {probe.show(probe.settings.home)}"
    if free < DISK_ERROR_BYTES:
        return error(name, text + ": SQLite writes will fail", f"free some space on {probe.show(where)}")
    if free < DISK_WARNING_BYTES:
        return warning(name, text, f"free some space on {probe.show(where)}")
    return passed(name, text)


def check_spend(probe: _Probe) -> Check | None:
    if probe.db is None:
        return None
    name = "LLM spend today"
    if "llm_calls" not in _tables(probe.db):  # a database from before the job queue existed
        return passed(name, "no LLM spend recorded")
    spent = today_spend(probe.db)[0]
    budget = float(probe.settings.daily_budget_usd)
    text = f"${spent:.2f} of the ${budget:.2f} daily budget (UTC day)"
    if spent >= budget:
        return warning(name, f"{text}: budget reached, LLM jobs paused until 00:00 UTC",
                        "wait for 00:00 UTC, or raise daily_budget_usd in config.toml")
    if budget > 0 and spent >= BUDGET_WARNING_SHARE * budget:
        return warning(name, f"{text}: {spent / budget:.0%} used", "raise daily_budget_usd in config.toml if needed")
    return passed(name, text)


def check_shared_memory(probe: _Probe) -> Check:
    """Shared memory (when configured): the server answers and accepts this machine; the sync's lag and last error."""
    from processor.service.units import load_env_file
    from processor.share import commands as share_commands
    from processor.share import connection as share_connection
    from processor.share.errors import ShareError

    settings = probe.settings
    name = "shared memory"
    if not share_connection.configured(settings):
        return passed(name, "off (shared_database_url is not set; docs/shared-memory.md)")
    load_env_file(settings.home / "env")  # PGPASSWORD, as the processor reads it
    local = share_commands.status_of(probe.db, settings) if probe.db is not None else {}
    try:
        db = share_connection.connect(settings)
    except ShareError as exc:
        return error(name, exc.problem, exc.fix)
    try:
        clock = share_connection.clock_warning(db)
        text = f"{db.where} as {db.role}, schema version {db.schema_version}"
    finally:
        db.close()
    lag = local.get("seconds_since_sync")
    text += (f"; {local.get('pending', 0)} changes to push, last sync "
             + (f"{lag:.0f} s ago" if lag is not None else "never (is the processor running?)"))
    if local.get("last_error"):
        return warning(name, f"{text}; the processor's last error ({local.get('last_error_at')}): "
                              f"{local['last_error']}", local.get("last_error_fix"))
    if clock:
        return warning(name, f"{text}; {clock.problem}", clock.fix)
    if local.get("kept_local") or local.get("refused"):
        return warning(name, f"{text}; {local.get('kept_local', 0)} memories kept on this machine (too large), "
                              f"{local.get('refused', 0)} rows refused from the server",
                        "`engram share status` lists them; raise share_max_memory_kb for the first")
    return passed(name, text)


def check_transcripts(probe: _Probe) -> Check:
    name = "transcripts"
    root = probe.settings.transcripts_root
    shown = probe.show(root)
    hint = "start Claude Code once, or set projects_dir in config.toml if it keeps transcripts elsewhere"
    if not root.exists():
        return warning(name, f"{shown} does not exist: nothing to capture yet", hint)
    if not root.is_dir() or not os.access(root, os.R_OK | os.X_OK):
        return warning(name, f"{shown} is not a readable directory", f"chmod u+rx {shown}, or {hint}")
    projects = sum(1 for entry in os.scandir(root) if entry.is_dir())
    found = f"{shown} ({projects} project{'s' if projects != 1 else ''})"
    problems = _capture_problems(probe)
    if problems:
        listed = "; ".join(f"{probe.show(Path(str(p['path'])))}: {p['detail']}" for p in problems)
        return warning(name, f"{found}; {len(problems)} cannot be captured: {listed}",
                        "fix or remove each file named (each says what is wrong)")
    return passed(name, found)


def _capture_problems(probe: _Probe) -> list[dict[str, Any]]:
    from processor.capture.agents import transcript_formats
    from processor.capture.discover import survey
    from processor.capture.problems import PROBLEMS_FILE
    from processor.service.pidfile import is_running

    settings = probe.settings
    saved = settings.run_dir / PROBLEMS_FILE if is_running(settings.run_dir) else None
    return survey(transcript_formats(settings), saved)


# --------------------------------------------------------------------------- running and reporting


# Each runs on its own: its name is the ✗ line's when it raises. An agent's line(s) come from its own module.
CHECKS: tuple[tuple[str, Callable[[_Probe], Check | list[Check] | None]], ...] = (
    ("config", check_config),
    ("data home", check_home),
    ("data directory", check_permissions),
    ("database", check_database),
    ("schema", check_schema),
    ("embedding model", check_model),
    ("stored vectors", check_vectors),
    *((agent.TITLE, _registration_checks(agent)) for agent in AGENTS.values()),
    ("service", check_service),
    ("processor", check_processor),
    ("disk space", check_disk),
    ("LLM spend today", check_spend),
    ("transcripts", check_transcripts),
    ("shared memory", check_shared_memory),
)


def run_checks(env: Mapping[str, str] | None = None) -> list[Check]:
    """Run every check against the Engram home named by ``env`` (default: os.environ).

    A check that does not apply (the schema of a database that does not exist) is left out; a check
    that raises is reported as a failed check with the exception's message. An agent's registration
    can be more than one line (Claude Code's hooks and its MCP server).
    """
    env = os.environ if env is None else env
    probe = _load_probe(env)
    checks: list[Check] = []
    try:
        for name, run in CHECKS:
            try:
                result = run(probe)
            except Exception as exc:  # one broken check must never hide the others
                result = error(name, f"the check itself failed: {type(exc).__name__}: {exc}", None)
            if isinstance(result, Check):
                checks.append(result)
            elif result is not None:
                checks.extend(result)
    finally:
        if probe.db is not None:
            probe.db.close()
    return checks


def format_report(checks: list[Check]) -> str:
    """✓ / ✗ / ! lines, the fix indented under each problem, and a one-line summary."""
    lines: list[str] = []
    for check in checks:
        mark = "✓" if check.ok else ("✗" if check.severity == "error" else "!")
        lines.append(f"{mark} {check.name}: {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"    fix: {check.fix}")
    errors = sum(1 for c in checks if c.failed)
    warnings = sum(1 for c in checks if not c.ok and c.severity == "warning")
    summary = f"{errors} problem{'s' if errors != 1 else ''}" if errors else "no problems"
    if warnings:
        summary += f", {warnings} warning{'s' if warnings != 1 else ''}"
    lines.append("")
    lines.append(summary)
    return "\n".join(lines)  # no final newline: the CLI print()s it


def exit_code(checks: list[Check]) -> int:
    """0 when no check failed with severity "error"; 1 otherwise."""
    return 1 if any(c.failed for c in checks) else 0
