"""`engram doctor` on a healthy home (everything ✓, exit 0) and on broken ones (each ✗ with its fix)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from processor import doctor
from processor.check import Check
from processor.config import ensure_home, load_settings
from processor.doctor import exit_code, format_report, run_checks
from processor.files import write_atomic
from processor.install import claude, codex, gemini
from processor.install.registration import Registration, default_registration, hook_script
from processor.memory.gguf_convert import GGUF_FILENAME, MODEL_NAME, ensure_default_gguf
from processor.service import units
from processor.service.control_server import ControlServer
from processor.service.pidfile import PidFile
from processor.store import open_store
from processor.store.jobs import LLMCall, insert_llm_call
from processor.store.migrations import MIGRATIONS

from .conftest import run_engram


@dataclass
class Home:
    """A fake user: $HOME, ENGRAM_HOME, CLAUDE_CONFIG_DIR, all under tmp_path, and the env naming them."""

    env: dict[str, str]
    home: Path
    claude: Path
    ping: dict = field(default_factory=dict)  # what the fake processor's /ping answers

    @property
    def db(self) -> Path:
        return self.home / "engram.db"


# Every line of a healthy home's report, in order (each agent's line or lines come from its install module).
EVERY_CHECK = ["config", "data home", "data directory", "database", "schema", "embedding model", "stored vectors",
               "Claude Code hooks", "Claude Code MCP server", "Codex CLI", "Gemini CLI", "Copilot CLI", "Qwen Code",
               "opencode", "pi",
               "service", "processor",
               "disk space", "LLM spend today", "transcripts", "shared memory"]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def _env(tmp_path: Path, models_dir: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir()
    return {
        "HOME": str(user),
        "XDG_CONFIG_HOME": str(user / ".config"),
        "ENGRAM_HOME": str(tmp_path / "engram-home"),
        "ENGRAM_MODELS_DIR": str(models_dir),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


@pytest.fixture
def healthy(tmp_path: Path, shared_models_dir: Path) -> Iterator[Home]:
    """Everything in place: private home, migrated DB, converted model, Claude Code set up, service
    unit written, and a live processor (pid lock + control server) answering /ping."""
    env = _env(tmp_path, shared_models_dir)
    settings = load_settings(env=env)
    ensure_home(settings)
    conn = open_store(settings.db_path)
    conn.execute("INSERT INTO meta(key, value) VALUES ('embedding_model', ?), ('embedding_dim', '384')", (MODEL_NAME,))
    conn.close()
    ensure_default_gguf(settings.models_dir)
    (settings.transcripts_root / "-home-me-project").mkdir(parents=True)
    claude.install(default_registration(), env=env)
    unit = units.service_file(settings.home, settings.logs_dir, env=env)
    unit.path.parent.mkdir(parents=True)
    unit.path.write_text(unit.text)
    ping = {"uptime_seconds": 42.0, "queue_depth": 0, "mcp_tools": "ready"}
    with PidFile(settings.run_dir), ControlServer(settings.run_dir, port=0, ping=lambda: ping, poll_interval=0.02):
        yield Home(env, settings.home, Path(env["CLAUDE_CONFIG_DIR"]), ping)


# --------------------------------------------------------------------------- the two homes


def test_healthy_home_is_all_green(healthy: Home) -> None:
    checks = run_checks(healthy.env)
    report = format_report(checks)
    assert [c.name for c in checks] == EVERY_CHECK, report
    assert all(c.ok for c in checks), report
    assert exit_code(checks) == 0
    assert "✗" not in report and "!" not in report and report.rstrip().endswith("no problems")
    found = by_name(checks)
    assert "running" in found["processor"].detail and "up 42 s" in found["processor"].detail
    assert "MCP tools ready" in found["processor"].detail
    assert found["LLM spend today"].detail == "$0.00 of the $0.50 daily budget (UTC day)"
    assert found["stored vectors"].detail == f"made by {MODEL_NAME}, the configured model"
    assert "1 project" in found["transcripts"].detail


def test_broken_home_reports_each_problem_with_its_fix(healthy: Home, tmp_path: Path) -> None:
    # A config syntax error on line 2, a world-readable home, a corrupt DB, a model configured by a
    # path that does not exist, and a settings.json that is not JSON.
    (healthy.home / "config.toml").write_text("recall_limit = 5\nrecent_days = = 3\n")
    healthy.home.chmod(0o755)
    healthy.db.write_bytes(os.urandom(16384))
    missing_model = tmp_path / "nowhere" / "model.gguf"
    env = {**healthy.env, "ENGRAM_EMBEDDING_MODEL": str(missing_model)}
    settings_json = healthy.claude / "settings.json"
    settings_json.write_text('{"hooks": {,}}\n')

    checks = run_checks(env)
    report = format_report(checks)
    found = by_name(checks)

    config = found["config"]
    assert not config.ok and config.severity == "error"
    assert "config.toml" in config.detail and "line 2" in (config.fix or "")

    perms = found["data directory"]
    assert not perms.ok and "755" in perms.detail and f"chmod 700 {healthy.home}" in (perms.fix or "")

    db = found["database"]
    assert not db.ok and db.severity == "error"
    assert f"mv {healthy.db} {healthy.db}.broken" in (db.fix or "") and "engram backfill" in (db.fix or "")

    model = found["embedding model"]
    assert not model.ok and model.severity == "error" and str(missing_model) in model.detail

    hooks = found["Claude Code hooks"]
    assert not hooks.ok and str(settings_json) in hooks.detail and "invalid JSON at line 1" in hooks.detail

    # The other checks still ran (and the dependent DB checks were skipped, not crashed).
    for name in ("Claude Code MCP server", "service", "processor", "disk space", "transcripts"):
        assert found[name].ok, report
    assert "schema" not in found and "LLM spend today" not in found
    assert exit_code(checks) == 1
    for check in (config, perms, db, model, hooks):
        assert f"✗ {check.name}: " in report and f"    fix: {check.fix}" in report
    assert report.rstrip().endswith("5 problems")


# --------------------------------------------------------------------------- single checks


def test_nothing_set_up_yet_is_warnings_and_errors_not_crashes(tmp_path: Path, shared_models_dir: Path) -> None:
    env = _env(tmp_path, shared_models_dir)
    found = by_name(run_checks(env))
    for name in ("data directory", "database", "service", "processor", "transcripts"):
        assert not found[name].ok and found[name].severity == "warning", found[name]
    assert "engram backfill" in (found["database"].fix or "")
    assert found["Claude Code hooks"].fix == found["Claude Code MCP server"].fix == "engram install"
    assert found["service"].fix == "engram service install"


def test_invalid_value_points_at_its_line(healthy: Home) -> None:
    (healthy.home / "config.toml").write_text('# tuning\nrecent_days = 3\nrecall_limit = "many"\n')
    config = by_name(run_checks(healthy.env))["config"]
    assert not config.ok and "recall_limit" in config.detail and "line 3" in (config.fix or "")


def test_bad_environment_variable_names_the_variable(healthy: Home) -> None:
    config = by_name(run_checks({**healthy.env, "ENGRAM_RECALL_LIMIT": "lots"}))["config"]
    assert not config.ok and config.fix == "fix or unset $ENGRAM_RECALL_LIMIT"


def test_loose_private_files(healthy: Home) -> None:
    healthy.db.chmod(0o644)
    perms = by_name(run_checks(healthy.env))["data directory"]
    assert not perms.ok and perms.fix == f"chmod 600 {healthy.db}"


def test_database_from_a_newer_engram(healthy: Home) -> None:
    conn = open_store(healthy.db)
    conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES ('m999_from_the_future', 0)")
    conn.close()
    schema = by_name(run_checks(healthy.env))["schema"]
    assert not schema.ok and schema.severity == "error" and "newer Engram" in schema.detail


def test_pending_migrations_are_a_warning(healthy: Home) -> None:
    conn = open_store(healthy.db)
    latest = MIGRATIONS[-1].__name__
    conn.execute("DELETE FROM schema_migrations WHERE name = ?", (latest,))
    conn.close()
    checks = run_checks(healthy.env)
    schema = by_name(checks)["schema"]
    assert not schema.ok and schema.severity == "warning" and f"pending: {latest}" in schema.detail
    assert schema.fix == "engram run (migrates automatically)"
    assert exit_code(checks) == 0


def test_vectors_from_another_model_need_reindex(healthy: Home) -> None:
    conn = open_store(healthy.db)
    conn.execute("UPDATE meta SET value = 'nomic-embed-text-v1.5.Q8_0.gguf' WHERE key = 'embedding_model'")
    conn.close()
    vectors = by_name(run_checks(healthy.env))["stored vectors"]
    assert not vectors.ok and vectors.severity == "error" and (vectors.fix or "").startswith("engram reindex")


def test_model_configured_by_path(healthy: Home, tmp_path: Path) -> None:
    good = Path(healthy.env["ENGRAM_MODELS_DIR"]) / GGUF_FILENAME
    copy = tmp_path / "my-embedder.gguf"
    copy.write_bytes(good.read_bytes())
    found = by_name(run_checks({**healthy.env, "ENGRAM_EMBEDDING_MODEL": str(copy)}))
    assert found["embedding model"].ok, found["embedding model"]
    # The DB holds vectors from the default model, so this model would mix them.
    assert not found["stored vectors"].ok and "my-embedder.gguf" in found["stored vectors"].detail

    copy.write_bytes(good.read_bytes()[:4096])  # truncated
    model = by_name(run_checks({**healthy.env, "ENGRAM_EMBEDDING_MODEL": str(copy)}))["embedding model"]
    assert not model.ok and "not a usable GGUF" in model.detail


def test_unconverted_default_model_is_a_warning(healthy: Home, tmp_path: Path) -> None:
    empty = tmp_path / "no-models"
    empty.mkdir()
    model = by_name(run_checks({**healthy.env, "ENGRAM_MODELS_DIR": str(empty)}))["embedding model"]
    assert not model.ok and model.severity == "warning" and "converts it" in model.detail


def test_hooks_pointing_at_a_deleted_interpreter(healthy: Home, tmp_path: Path) -> None:
    gone = str(tmp_path / "deleted-venv" / "bin" / "python")
    registration = Registration(hook_python=gone, engram_python=gone, hook_script=hook_script())
    claude.install(registration, env=healthy.env)
    found = by_name(run_checks(healthy.env))
    for name in ("Claude Code hooks", "Claude Code MCP server"):
        assert not found[name].ok and "deleted-venv" in found[name].detail
        assert (found[name].fix or "").startswith("engram install")


def test_hooks_not_installed(healthy: Home) -> None:
    claude.uninstall(env=healthy.env)  # install created settings.json: uninstall removed it
    found = by_name(run_checks(healthy.env))
    hooks = found["Claude Code hooks"]
    assert not hooks.ok and "does not exist: Engram's hooks are not installed" in hooks.detail
    assert not found["Claude Code MCP server"].ok and found["Claude Code MCP server"].fix == "engram install"


def test_hooks_an_earlier_engram_registered_are_recognised_and_install_replaces_them(healthy: Home) -> None:
    """Old checkout paths and the `-m` SessionStart command of before the launcher are still Engram's hooks."""
    old = "/old/venv/bin/python3"
    healthy.claude.joinpath("settings.json").write_text(json.dumps({"hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": f"{old} -I -S /old/checkout/recall_hook/pretooluse.py"}]}],
        "PostToolUseFailure": [{"matcher": "*", "hooks": [
            {"type": "command", "command": f"{old} -I -S /old/checkout/recall_hook/tool_failure.py"}]}],
        "PostToolUse": [{"matcher": "Task|Agent", "hooks": [
            {"type": "command", "command": f"{old} -I -S /old/checkout/recall_hook/tool_failure.py"}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": f"{old} -I -m processor.recall.session_start"}]}],
    }}))
    hooks = by_name(run_checks(healthy.env))["Claude Code hooks"]
    assert not hooks.ok and "not registered" not in hooks.detail, hooks
    for event in ("PreToolUse", "PostToolUseFailure", "PostToolUse", "SessionStart"):
        assert f"{event} hook needs {old}, which is gone" in hooks.detail
    claude.install(default_registration(), env=healthy.env)
    assert by_name(run_checks(healthy.env))["Claude Code hooks"].ok
    assert "/old/" not in healthy.claude.joinpath("settings.json").read_text()


def test_stale_pid_file_is_a_warning(tmp_path: Path, shared_models_dir: Path) -> None:
    env = _env(tmp_path, shared_models_dir)
    settings = load_settings(env=env)
    ensure_home(settings)
    (settings.run_dir / "engram.pid").write_text("4242\nnot-a-start-token\n")
    processor = by_name(run_checks(env))["processor"]
    assert not processor.ok and processor.severity == "warning" and "stale pid file from pid 4242" in processor.detail


def test_processor_holding_the_lock_but_not_answering_is_an_error(tmp_path: Path, shared_models_dir: Path) -> None:
    env = _env(tmp_path, shared_models_dir)
    settings = load_settings(env=env)
    ensure_home(settings)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with PidFile(settings.run_dir):
        write_atomic(settings.run_dir / "engram.port", f"{port}\n")
        processor = by_name(run_checks(env))["processor"]
    assert not processor.ok and processor.severity == "error" and "not answering" in processor.detail


def test_service_unit_with_a_deleted_interpreter(healthy: Home) -> None:
    path = units.unit_path(units.detect_platform(), healthy.env)
    path.write_text(path.read_text().replace(os.path.abspath(sys.executable), "/nonexistent/python3"))
    service = by_name(run_checks(healthy.env))["service"]
    assert not service.ok and "/nonexistent/python3" in service.detail and "engram service install" in service.fix


def _record_spend(db: Path, rows: list[tuple[float, float]]) -> None:
    """LLM calls recorded the way the job worker records them."""
    conn = open_store(db)
    for at, cost in rows:
        insert_llm_call(conn, LLMCall(None, "extract", "openai", "gpt-4.1-nano", int(at * 1000), 100, 1000, 100,
                                      cost, True, None))
    conn.close()


def test_spend_near_and_over_the_budget(healthy: Home) -> None:
    now = time.time()
    _record_spend(healthy.db, [(now, 0.20), (now, 0.21), (now - 3 * 86400, 9.0)])  # the old row is not today
    checks = run_checks(healthy.env)
    spend = by_name(checks)["LLM spend today"]
    assert not spend.ok and spend.severity == "warning" and "$0.41 of the $0.50" in spend.detail
    assert exit_code(checks) == 0

    spend = by_name(run_checks({**healthy.env, "ENGRAM_DAILY_BUDGET_USD": "0.40"}))["LLM spend today"]
    assert not spend.ok and spend.severity == "warning" and "paused until 00:00 UTC" in spend.detail

    spend = by_name(run_checks({**healthy.env, "ENGRAM_DAILY_BUDGET_USD": "5"}))["LLM spend today"]
    assert spend.ok and spend.detail.startswith("$0.41 of the $5.00")


def test_low_disk_space(healthy: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "DISK_WARNING_BYTES", 1 << 62)
    disk = by_name(run_checks(healthy.env))["disk space"]
    assert not disk.ok and disk.severity == "warning"
    monkeypatch.setattr(doctor, "DISK_ERROR_BYTES", 1 << 62)
    disk = by_name(run_checks(healthy.env))["disk space"]
    assert not disk.ok and disk.severity == "error"


def test_a_crashing_check_is_reported_and_the_others_still_run(healthy: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(probe: object) -> Check:
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "CHECKS", (("exploding", explode), *doctor.CHECKS))
    checks = run_checks(healthy.env)
    assert checks[0] == Check("exploding", False, "the check itself failed: RuntimeError: boom", None, "error")
    assert all(c.ok for c in checks[1:]) and [c.name for c in checks[1:]] == EVERY_CHECK
    assert exit_code(checks) == 1


def test_report_format_and_exit_code() -> None:
    checks = [
        Check("a", True, "fine"),
        Check("b", False, "slow", "wait", "warning"),
    ]
    assert format_report(checks) == "✓ a: fine\n! b: slow\n    fix: wait\n\nno problems, 1 warning"
    assert exit_code(checks) == 0
    checks.append(Check("c", False, "broken", "mend it"))
    assert format_report(checks).endswith("✗ c: broken\n    fix: mend it\n\n1 problem, 1 warning")
    assert exit_code(checks) == 1


# --------------------------------------------------------------------------- the real CLI


def test_cli_doctor_exit_status(healthy: Home) -> None:
    done = run_engram("doctor", env=healthy.env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ database" in done.stdout

    healthy.db.write_bytes(os.urandom(16384))
    (healthy.claude / "settings.json").write_text("not json")
    done = run_engram("doctor", env=healthy.env, check=False)
    assert done.returncode != 0
    assert "✗ database" in done.stdout and "✗ Claude Code hooks" in done.stdout


def test_doctor_lists_files_that_cannot_be_captured_and_the_processors_own_list(healthy: Home) -> None:
    project = Path(healthy.env["CLAUDE_CONFIG_DIR"]) / "projects" / "-home-me-project"
    (project / "good.jsonl").write_text("{}\n")
    os.mkfifo(project / "pipe.jsonl")
    os.symlink(project / "gone", project / "dangling.jsonl")
    # What only reading reveals comes from the running processor's published list.
    write_atomic(healthy.home / "run" / "capture-problems.json", json.dumps([{
        "path": str(project / "good.jsonl"), "kind": "long_line", "since": 0.0,
        "detail": "line at byte 0 is 20000000 bytes, over max_line_bytes=16777216; skipped"}]))
    check = by_name(run_checks(healthy.env))["transcripts"]
    assert not check.ok and check.severity == "warning"
    assert "3 cannot be captured" in check.detail
    assert "pipe.jsonl: is a named pipe (FIFO)" in check.detail
    assert "dangling.jsonl: symbolic link to missing" in check.detail
    assert "over max_line_bytes" in check.detail
    assert (project / "pipe.jsonl").exists()  # doctor changed nothing


def test_an_earlier_engrams_mcp_registration_is_a_warning(healthy: Home) -> None:
    """Registered before the bridge: a full server per session (over a second to start) still works."""
    path = claude.default_mcp_config_path(healthy.env)
    config = json.loads(path.read_text())
    config["mcpServers"]["engram"]["args"] = ["-I", "-m", "mcp_tools.server"]
    path.write_text(json.dumps(config))
    check = by_name(run_checks(healthy.env))["Claude Code MCP server"]
    assert not check.ok and check.severity == "warning" and "earlier Engram" in check.detail
    assert (check.fix or "").startswith("engram install")


def test_a_processor_that_cannot_serve_the_mcp_tools_is_a_warning(healthy: Home) -> None:
    healthy.ping["mcp_tools"] = "unavailable: ImportError: no module named mcp"
    check = by_name(run_checks(healthy.env))["processor"]
    assert not check.ok and check.severity == "warning" and "ImportError" in check.detail
    assert "server of its own" in check.detail


# --------------------------------------------------------------------------- the other agents


def test_codex_and_gemini_checks(healthy: Home) -> None:
    found = by_name(run_checks(healthy.env))
    assert found["Codex CLI"].ok and "not installed here" in found["Codex CLI"].detail
    assert found["Gemini CLI"].ok and "not installed here" in found["Gemini CLI"].detail
    user = Path(healthy.env["HOME"])
    registration = default_registration()

    codex_dir = user / ".codex"
    codex_dir.mkdir()
    found = by_name(run_checks(healthy.env))
    assert not found["Codex CLI"].ok and found["Codex CLI"].fix == "engram install --agent codex"
    codex.install(registration, codex_dir=codex_dir, trust=False)
    check = by_name(run_checks(healthy.env))["Codex CLI"]
    assert not check.ok and "skips Engram's" in check.detail and "not trusted" in check.detail, check
    assert "/hooks" in check.fix and check.failed
    codex.install(registration, codex_dir=codex_dir)
    check = by_name(run_checks(healthy.env))["Codex CLI"]
    assert check.ok and "registered and trusted" in check.detail, check
    (codex_dir / "config.toml").write_text((codex_dir / "config.toml").read_text() + "\n[broken\n")
    check = by_name(run_checks(healthy.env))["Codex CLI"]
    assert not check.ok and "invalid TOML" in check.detail and check.detail.count("Codex cannot read it") == 1, check

    gemini_dir = user / ".gemini"
    gemini_dir.mkdir()
    (gemini_dir / "settings.json").write_text('{"ui": {"theme": "GitHub"}}\n')
    check = by_name(run_checks(healthy.env))["Gemini CLI"]
    assert not check.ok and "SessionStart, AfterTool not registered" in check.detail
    gemini.install(registration, path=gemini_dir / "settings.json")
    check = by_name(run_checks(healthy.env))["Gemini CLI"]
    assert check.ok and "SessionStart, AfterTool and MCP server engram registered" in check.detail, check
