"""The claude backend: a fake SDK transport for faults, a fake `claude` CLI for no-recursion."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from processor.capture.claude import ClaudeFormat
from processor.capture.discover import discover
from processor.config import claude_config_dir
from processor.jobs import JobRunner
from processor.jobs.backends import BackendError, OutputError, choose_backend
from processor.jobs.backends.claude_backend import ClaudeBackend, claude_login
from processor.jobs.extraction import Extractor
from tests.support.fake_claude import FakeClaudeTransport, fake_cli_env, write_fake_cli
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query


class Transports:
    """A transport factory that fails or hangs per call, then answers."""

    def __init__(self, modes: list[str]) -> None:
        self.modes = list(modes)
        self.made: list[FakeClaudeTransport] = []

    def __call__(self, options):
        transport = FakeClaudeTransport(options, self.modes.pop(0) if self.modes else "ok")
        self.made.append(transport)
        return transport


def _runner(settings, transports: Transports) -> JobRunner:
    return JobRunner(settings, backend=ClaudeBackend(settings, transport_factory=transports))


def test_claude_backend_extracts_and_records_the_cli_reported_cost(engram_home: Path) -> None:
    settings = make_settings(extractor="claude", claude_model="claude-haiku-4-5")
    add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
    transports = Transports(["ok"])
    runner = _runner(settings, transports)
    drain(runner)
    runner.close()
    assert query(settings, "SELECT summary, importance, kind FROM episodes") == \
        [("Claude extracted: the store uses WAL mode", "high", "decision")]
    assert query(settings, "SELECT backend, model, tokens_in, tokens_out, cost_usd, ok FROM llm_calls") == \
        [("claude", "claude-haiku-4-5", 1200, 150, 0.0123, 1)]
    [transport] = transports.made
    user = next(m for m in transport.written if m.get("type") == "user")
    assert "Question 0 about" in user["message"]["content"]
    assert user.get("client_composed") is True  # verbatim: no @file expansion, no slash commands in the child
    assert transport.initialize_request.get("hooks") is None  # no hook callbacks registered with the child
    assert "agents" not in transport.initialize_request and transport.initialize_request.get("skills") == []


@pytest.mark.parametrize(("modes", "words", "error_class"), [
    (["error"], "HTTP 529", BackendError),
    (["structured_retries"], "error_max_structured_output_retries", OutputError),
    (["crash"], "claude CLI failed", BackendError),
    (["hang"], "did not answer within", BackendError),
])
def test_claude_faults_retry_then_drain(engram_home: Path, modes: list[str], words: str, error_class) -> None:
    settings = make_settings(extractor="claude", llm_timeout_seconds=0.5)
    ids = add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
    backend = ClaudeBackend(settings, transport_factory=Transports(list(modes)))
    request = Extractor().request("[user]\nhi", settings)
    with pytest.raises(error_class, match=words):
        backend.complete(request)
    runner = _runner(settings, Transports(list(modes)))
    drain(runner)
    runner.close()
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 1
    assert query(settings, "SELECT extracted_through FROM extraction_state") == [(ids[-1],)]
    assert query(settings, "SELECT ok FROM llm_calls ORDER BY id") == [(0,), (1,)]
    if modes == ["error"]:  # an API error still cost what the CLI reports
        assert query(settings, "SELECT cost_usd FROM llm_calls ORDER BY id")[0][0] == pytest.approx(0.0123)


def test_no_recursion_child_gets_no_settings_hooks_mcp_or_tools_and_is_not_captured(
        engram_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_dir = tmp_path / "claude-config"
    projects = config_dir / "projects"
    projects.mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("ENGRAM_PROJECTS_DIR", str(projects))
    record = tmp_path / "record.json"
    for key, value in fake_cli_env(record).items():
        monkeypatch.setenv(key, value)
    # The user's own settings would load hooks and this plugin: they must not reach the child.
    (config_dir / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [
        {"type": "command", "command": "engram-hook"}]}]}, "enabledPlugins": {"engram@engram": True}}))
    settings = make_settings(extractor="claude")
    add_messages(settings, "s1", conversation(3), activity_ms=now_ms() - 600_000)
    user_transcript = projects / "-home-user-project" / "11111111-2222-3333-4444-555555555555.jsonl"
    user_transcript.parent.mkdir()
    user_transcript.write_text('{"type": "user"}\n')

    backend = ClaudeBackend(settings, cli_path=write_fake_cli(tmp_path / "bin"))
    runner = JobRunner(settings, backend=backend)
    drain(runner)
    runner.close()
    assert query(settings, "SELECT source_type FROM episodes") == [("auto",)]

    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert "--setting-sources=" in argv  # no user, project or local settings: no hooks, no plugins
    assert "--strict-mcp-config" in argv and "--mcp-config" not in argv  # no MCP servers from anywhere
    assert argv[argv.index("--tools") + 1] == ""  # no built-in tools
    assert "--allowedTools" not in argv and "Bash" in argv[argv.index("--disallowedTools") + 1].split(",")
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert int(argv[argv.index("--max-turns") + 1]) <= 3
    assert "--plugin-dir" not in argv and "--settings" not in argv
    assert json.loads(argv[argv.index("--json-schema") + 1])["required"] == ["memories", "rolling_summary"]
    init = next(m["request"] for m in seen["stdin"] if m.get("type") == "control_request")
    assert init["subtype"] == "initialize" and init.get("hooks") is None
    assert seen["env"]["ENGRAM_AGENT_CHILD"] == "1"
    assert Path(seen["cwd"]) == settings.agent_workdir
    assert stat.S_IMODE(settings.agent_workdir.stat().st_mode) == 0o700

    # The child's transcript landed in Claude's projects folder, under the agent dir's name, and the
    # tailer neither accepts nor discovers it, while the user's own transcript is found.
    child_transcript = Path(seen["transcript"])
    assert child_transcript.is_file() and child_transcript.parent.parent == projects
    transcript_filter = ClaudeFormat(settings.transcripts_root, settings.agent_workdir)
    assert not transcript_filter.accepts(child_transcript)
    assert discover(settings.transcripts_root, transcript_filter, None) == [user_transcript]


def test_the_runner_refuses_llm_work_inside_engrams_own_child(engram_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_AGENT_CHILD", "1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    settings = make_settings(extractor="auto")
    runner = JobRunner(settings)
    runner.open()
    runner.close()
    assert runner.backend is None and "Engram's own agent" in runner.backend_reason


def test_claude_login_detection(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")}
    assert claude_login(env) is None
    (home / ".claude.json").write_text(json.dumps({"oauthAccount": {"emailAddress": "a@b.c"}}))
    assert "logged-in account" in (claude_login(env) or "")
    assert claude_login({"ANTHROPIC_API_KEY": "x", "HOME": str(tmp_path)}) == "$ANTHROPIC_API_KEY is set"
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / ".credentials.json").write_text("{}")
    assert ".credentials.json" in (claude_login({"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")})
                                   or "")
    assert claude_config_dir(env) == tmp_path / "cfg"


def test_auto_picks_the_first_available_backend(engram_home: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert choose_backend(make_settings(extractor="auto"))[0] == "verbatim"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    assert choose_backend(make_settings(extractor="auto"))[0] == "claude"
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    assert choose_backend(make_settings(extractor="auto"))[0] == "openai"
    assert choose_backend(make_settings(extractor="auto", llama_model="/models/x.gguf"))[0] == "llama"
    assert choose_backend(make_settings(extractor="verbatim", llama_model="/models/x.gguf"))[0] == "verbatim"
    with pytest.raises(Exception, match="not a backend"):
        choose_backend(make_settings(extractor="gpt"))
