"""`engram install` / `engram uninstall`: Engram's hooks merged into a Claude Code settings.json
that already has the user's own, its MCP server into the user-scope MCP table, idempotently,
with a backup, and removed exactly; plus the plugin layout generated from the same source."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from processor.hook_kit import hook_io as fence
from processor.install import claude
from processor.install import registration as reg
from processor.install.json_file import BACKUP_SUFFIX, ChangeReport
from processor.install.plugin import plugin_files, write_plugin
from processor.install.registration import InstallError, Registration, is_engram_hook
from recall_hook.session_start import LAUNCHER as SESSION_START_LAUNCHER

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "recall_hook" / "pretooluse.py"
PYTHON = reg.hook_python()

USER_SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "model": "opus",
    "env": {"ANTHROPIC_API_KEY": "sk-ant-SECRET-in-settings"},
    "permissions": {"allow": ["Bash(ls:*)"], "deny": ["Read(./.env)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash",
             "hooks": [{"type": "command", "command": "/usr/local/bin/guard.sh", "timeout": 5}]},
            {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "check-paths"}]},
        ],
        "PostToolUse": [
            {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "prettier --write"}]},
        ],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
    "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
    "zzUnknownFutureKey": {"nested": [1, 2, {"x": None}]},
}

USER_CLAUDE_JSON = {
    "numStartups": 42,
    "hasCompletedOnboarding": True,
    "projects": {"/home/u/proj": {"allowedTools": [], "mcpServers": {}}},
    "mcpServers": {
        "github": {
            "type": "stdio", "command": "npx", "args": ["-y", "gh-mcp"],
            "env": {"GITHUB_TOKEN": "ghp_SECRET"},
        }
    },
    "oauthAccount": {"emailAddress": "u@example.com"},
}


@pytest.fixture
def registration(tmp_path: Path) -> Registration:
    return Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK)


@pytest.fixture
def claude_dir(tmp_path: Path) -> Path:
    path = tmp_path / "claude-config"
    path.mkdir()
    return path


@pytest.fixture
def settings_path(claude_dir: Path) -> Path:
    path = claude_dir / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS, indent=2) + "\n")
    return path


@pytest.fixture
def mcp_path(claude_dir: Path) -> Path:
    path = claude_dir / ".claude.json"
    path.write_text(json.dumps(USER_CLAUDE_JSON, indent=2) + "\n")
    return path


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def do_install(settings_path: Path, mcp_path: Path, registration: Registration,
               **kw: object) -> ChangeReport:
    return claude.install(registration, settings_path=settings_path, mcp_config_path=mcp_path, **kw)


def uninstall(settings_path: Path, mcp_path: Path, **kw: object) -> ChangeReport:
    return claude.uninstall(settings_path=settings_path, mcp_config_path=mcp_path, **kw)


def engram_commands(settings: dict, event: str) -> list[str]:
    return [
        hook["command"]
        for group in settings.get("hooks", {}).get(event, [])
        for hook in group["hooks"]
        if is_engram_hook(hook)
    ]


def backups(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if BACKUP_SUFFIX in p.name)


# ---------------------------------------------------------------- merge


def test_install_adds_engram_and_keeps_everything_else(settings_path: Path, mcp_path: Path,
                                                       registration: Registration) -> None:
    report = do_install(settings_path, mcp_path, registration)
    assert report.changed

    settings = load(settings_path)
    assert list(settings) == list(USER_SETTINGS)  # key order kept, nothing added at top level
    for key in USER_SETTINGS:
        if key != "hooks":
            assert settings[key] == USER_SETTINGS[key]
    hooks = settings["hooks"]
    assert list(hooks) == [*USER_SETTINGS["hooks"], "PostToolUseFailure"]  # an event the user had none for: added
    failure_hook = claude.hook(registration, "PostToolUseFailure")
    assert hooks["PostToolUseFailure"] == [{"matcher": "*", "hooks": [failure_hook.entry()]}]
    # The user's hooks come first and are untouched; Engram's are one group each, appended.
    assert hooks["PreToolUse"][:2] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert hooks["PreToolUse"][2] == {"matcher": "*", "hooks": [claude.hook(registration, "PreToolUse").entry()]}
    assert hooks["SessionStart"][0] == USER_SETTINGS["hooks"]["SessionStart"][0]
    assert hooks["SessionStart"][1] == {"hooks": [claude.hook(registration, "SessionStart").entry()]}
    # The user's PostToolUse hooks first, then Engram's for a sub-agent's call (a read it met refused).
    assert hooks["PostToolUse"][:-1] == USER_SETTINGS["hooks"]["PostToolUse"]
    assert hooks["PostToolUse"][-1] == {"matcher": "Task|Agent",
                                        "hooks": [claude.hook(registration, "PostToolUse").entry()]}
    assert claude.hook(registration, "PostToolUse").entry() == failure_hook.entry()  # the same script
    assert hooks["Stop"] == USER_SETTINGS["hooks"]["Stop"]

    config = load(mcp_path)
    assert list(config) == list(USER_CLAUDE_JSON)
    assert config["mcpServers"]["github"] == USER_CLAUDE_JSON["mcpServers"]["github"]
    assert config["mcpServers"]["engram"] == {
        "type": "stdio", "command": PYTHON, "args": ["-I", "-m", "mcp_tools.bridge"], "env": {},
    }
    assert config["projects"] == USER_CLAUDE_JSON["projects"]


def test_install_twice_is_install_once(settings_path: Path, mcp_path: Path,
                                       registration: Registration) -> None:
    do_install(settings_path, mcp_path, registration)
    first = (settings_path.read_bytes(), mcp_path.read_bytes())
    first_backups = backups(settings_path.parent)

    report = do_install(settings_path, mcp_path, registration)
    assert not report.changed
    assert "unchanged" in report.describe()
    assert (settings_path.read_bytes(), mcp_path.read_bytes()) == first
    assert backups(settings_path.parent) == first_backups  # nothing written, so nothing backed up
    assert len(engram_commands(load(settings_path), "PreToolUse")) == 1
    assert len(engram_commands(load(settings_path), "SessionStart")) == 1


def test_uninstall_removes_exactly_what_install_added(settings_path: Path, mcp_path: Path,
                                                      registration: Registration) -> None:
    original = (settings_path.read_bytes(), mcp_path.read_bytes())
    do_install(settings_path, mcp_path, registration)
    report = uninstall(settings_path, mcp_path)
    assert report.changed
    # Same formatting as Claude Code writes (2-space indent), so even the bytes come back.
    assert (settings_path.read_bytes(), mcp_path.read_bytes()) == original

    again = uninstall(settings_path, mcp_path)
    assert not again.changed


def test_uninstall_of_a_fresh_install_drops_the_containers_it_created(claude_dir: Path,
                                                                      registration: Registration) -> None:
    settings_path = claude_dir / "settings.json"
    mcp_path = claude_dir / ".claude.json"
    settings_path.write_text('{\n  "model": "sonnet"\n}\n')
    mcp_path.write_text('{\n  "numStartups": 1\n}\n')
    do_install(settings_path, mcp_path, registration)
    assert "hooks" in load(settings_path) and "mcpServers" in load(mcp_path)
    uninstall(settings_path, mcp_path)
    assert settings_path.read_text() == '{\n  "model": "sonnet"\n}\n'
    assert mcp_path.read_text() == '{\n  "numStartups": 1\n}\n'


def test_uninstall_leaves_user_hooks_sharing_a_group_with_engram(claude_dir: Path, mcp_path: Path) -> None:
    settings_path = claude_dir / "settings.json"
    engram_hook = {"type": "command", "command": f"{PYTHON} -I -S {HOOK}", "timeout": 10}
    user_hook = {"type": "command", "command": "audit-log"}
    group = {"matcher": "*", "hooks": [engram_hook, user_hook]}
    settings_path.write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
    uninstall(settings_path, mcp_path)
    assert load(settings_path) == {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [user_hook]}]}}


def test_reinstall_updates_an_old_engram_entry_in_place(claude_dir: Path, mcp_path: Path,
                                                        registration: Registration) -> None:
    """A moved venv or interpreter: the old command is replaced where it is, never duplicated,
    and a matcher the user narrowed is kept."""
    settings_path = claude_dir / "settings.json"
    old = {"type": "command", "command": "/old/venv/bin/python -I -S /old/checkout/recall_hook/pretooluse.py"}
    stray = {"type": "command", "command": "/older/python -I -S /older/recall_hook/pretooluse.py"}
    user = {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}
    settings_path.write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "Bash|Read", "hooks": [old]}, user, {"matcher": "*", "hooks": [stray]},
    ]}}))
    do_install(settings_path, mcp_path, registration)
    groups = load(settings_path)["hooks"]["PreToolUse"]
    assert groups == [{"matcher": "Bash|Read", "hooks": [claude.hook(registration, "PreToolUse").entry()]}, user]


def test_install_replaces_an_old_engram_mcp_server_but_not_a_foreign_one(settings_path: Path, mcp_path: Path,
                                                                        registration: Registration) -> None:
    config = load(mcp_path)
    config["mcpServers"]["engram"] = {"command": "/old/python", "args": ["-m", "mcp_tools.server"]}
    mcp_path.write_text(json.dumps(config))
    do_install(settings_path, mcp_path, registration)
    assert load(mcp_path)["mcpServers"]["engram"] == claude.server_entry(registration)

    config["mcpServers"]["engram"] = {"command": "npx", "args": ["-y", "someone-elses-engram"]}
    mcp_path.write_text(json.dumps(config))
    before = (settings_path.read_bytes(), mcp_path.read_bytes())
    with pytest.raises(InstallError, match=r"\.claude\.json.*not Engram's"):
        do_install(settings_path, mcp_path, registration)
    assert (settings_path.read_bytes(), mcp_path.read_bytes()) == before
    uninstall(settings_path, mcp_path)
    assert load(mcp_path)["mcpServers"]["engram"]["args"] == ["-y", "someone-elses-engram"]


# ---------------------------------------------------------------- files: backup, atomicity, errors


def test_backup_is_made_before_writing(settings_path: Path, mcp_path: Path,
                                       registration: Registration) -> None:
    originals = {settings_path: settings_path.read_bytes(), mcp_path: mcp_path.read_bytes()}
    report = do_install(settings_path, mcp_path, registration)
    for change in report.changes:
        assert change.written and change.backup is not None
        assert change.backup.parent == change.path.parent
        assert change.backup.read_bytes() == originals[change.path]
        assert f"backup: {change.backup}" in report.describe()


def test_dry_run_writes_nothing_and_shows_the_change(settings_path: Path, mcp_path: Path,
                                                     registration: Registration) -> None:
    listing = sorted(settings_path.parent.iterdir())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (settings_path, mcp_path)}

    report = do_install(settings_path, mcp_path, registration, dry_run=True)
    text = report.describe()
    assert report.changed and not any(c.written for c in report.changes)
    assert sorted(settings_path.parent.iterdir()) == listing
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    assert "would update" in text and "nothing was written" in text
    assert "+" in text and "recall_hook/pretooluse.py" in text and "mcp_tools.bridge" in text

    do_install(settings_path, mcp_path, registration)
    listing = sorted(settings_path.parent.iterdir())
    report = uninstall(settings_path, mcp_path, dry_run=True)
    assert report.changed and sorted(settings_path.parent.iterdir()) == listing
    assert "-" in report.describe()


def test_printed_change_never_shows_secrets_from_the_files(settings_path: Path, mcp_path: Path,
                                                           registration: Registration) -> None:
    for report in (do_install(settings_path, mcp_path, registration, dry_run=True),
                   do_install(settings_path, mcp_path, registration)):
        text = report.describe()
        assert "SECRET" not in text and "oauthAccount" not in text


@pytest.mark.parametrize("which", ["settings", "mcp"])
def test_malformed_json_is_an_error_naming_the_file_and_nothing_is_written(
    settings_path: Path, mcp_path: Path, registration: Registration, which: str
) -> None:
    broken = settings_path if which == "settings" else mcp_path
    broken.write_text('{"model": "opus",\n  "hooks": {oops}\n}\n')
    before = {p: p.read_bytes() for p in (settings_path, mcp_path)}
    listing = sorted(settings_path.parent.iterdir())
    for action in (lambda: do_install(settings_path, mcp_path, registration),
                   lambda: uninstall(settings_path, mcp_path)):
        with pytest.raises(InstallError) as excinfo:
            action()
        assert str(broken) in str(excinfo.value) and "line 2" in str(excinfo.value)
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(settings_path.parent.iterdir()) == listing


@pytest.mark.parametrize(
    "content, message",
    [('["a list"]', "expected a JSON object"), ('{"hooks": ["x"]}', '"hooks" is a list'),
     ('{"hooks": {"PreToolUse": {"matcher": "*"}}}', "hooks.PreToolUse is not a list")],
)
def test_misshapen_settings_is_an_error(settings_path: Path, mcp_path: Path, registration: Registration,
                                        content: str, message: str) -> None:
    settings_path.write_text(content)
    with pytest.raises(InstallError, match=message):
        do_install(settings_path, mcp_path, registration)
    assert settings_path.read_text() == content


def test_missing_files_are_created_private(tmp_path: Path, registration: Registration) -> None:
    settings_path = tmp_path / "new-config-dir" / "settings.json"
    mcp_path = tmp_path / "home" / ".claude.json"
    report = do_install(settings_path, mcp_path, registration)
    assert "created" in report.describe()
    assert load(settings_path) == {"hooks": claude.hooks_table(registration)}
    assert load(mcp_path) == {"mcpServers": {"engram": claude.server_entry(registration)}}
    for path in (settings_path, mcp_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not backups(settings_path.parent)


def test_uninstall_does_not_create_missing_files(tmp_path: Path) -> None:
    report = uninstall(tmp_path / "settings.json", tmp_path / ".claude.json")
    assert not report.changed
    assert list(tmp_path.iterdir()) == []


def test_file_mode_is_kept(settings_path: Path, mcp_path: Path, registration: Registration) -> None:
    settings_path.chmod(0o640)
    mcp_path.chmod(0o600)
    do_install(settings_path, mcp_path, registration)
    assert stat.S_IMODE(settings_path.stat().st_mode) == 0o640
    assert stat.S_IMODE(mcp_path.stat().st_mode) == 0o600


def test_a_symlinked_settings_file_stays_a_symlink(tmp_path: Path, mcp_path: Path,
                                                   registration: Registration) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps(USER_SETTINGS, indent=2) + "\n")
    link = tmp_path / "settings.json"
    link.symlink_to(dotfiles)
    do_install(link, mcp_path, registration)
    assert link.is_symlink()
    assert len(engram_commands(load(dotfiles), "PreToolUse")) == 1


def test_indentation_of_the_file_is_kept(claude_dir: Path, mcp_path: Path,
                                         registration: Registration) -> None:
    settings_path = claude_dir / "settings.json"
    settings_path.write_text(json.dumps({"model": "opus"}, indent=4))  # 4 spaces, no final newline
    do_install(settings_path, mcp_path, registration)
    text = settings_path.read_text()
    assert text.startswith('{\n    "model"') and not text.endswith("\n")


# ---------------------------------------------------------------- locations and commands


def test_locations_honour_claude_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert claude.default_settings_path({}) == tmp_path / "home" / ".claude" / "settings.json"
    assert claude.default_mcp_config_path({}) == tmp_path / "home" / ".claude.json"
    custom = tmp_path / "custom"
    env = {"CLAUDE_CONFIG_DIR": str(custom)}
    assert claude.default_settings_path(env) == custom / "settings.json"
    assert claude.default_mcp_config_path(env) == custom / ".claude.json"
    custom.mkdir()
    (custom / ".config.json").write_text("{}")  # a legacy global config, which Claude Code still prefers
    assert claude.default_mcp_config_path(env) == custom / ".config.json"


def test_registered_commands(registration: Registration) -> None:
    pre = claude.hook(registration, "PreToolUse")
    argv = shlex.split(pre.command)
    assert argv[0] == PYTHON and os.path.isabs(argv[0]) and not reg.is_shim(argv[0])
    assert argv[1:3] == ["-I", "-S"]
    assert argv[-1] == str(HOOK) and os.path.isabs(argv[-1])
    assert pre.matcher == "*" and pre.timeout == 10
    start = claude.hook(registration, "SessionStart")
    assert shlex.split(start.command) == [PYTHON, "-I", "-S", "-c", SESSION_START_LAUNCHER,
                                          str(registration.hook_script.with_name("session_start.py"))]
    assert start.matcher is None
    assert claude.server_entry(registration)["args"] == ["-I", "-m", "mcp_tools.bridge"]


def test_registered_hook_command_really_injects(tmp_path: Path, registration: Registration) -> None:
    home = tmp_path / "engram"
    (home / "recollections").mkdir(parents=True)
    (home / "recollections" / "s-1.json").write_text(json.dumps({
        "messageUuid": "m-1", "timestamp": 1, "bites": [
            {"id": "ep_1", "bite": "uses uv", "date": "2026-02-01", "importance": "normal"}],
    }))
    stdin = json.dumps({"session_id": "s-1", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                        "tool_input": {"command": "ls"}, "cwd": str(tmp_path), "transcript_path": "/t.jsonl"})
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "ENGRAM_HOME": str(home)}
    # Through a shell, as Claude Code runs it.
    done = subprocess.run(["/bin/sh", "-c", claude.hook(registration, "PreToolUse").command], input=stdin.encode(),
                          capture_output=True, env=env, timeout=10)
    assert done.returncode == 0, done.stderr
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(fence.FENCE_OPEN) and "(id: ep_1)" in context


def test_paths_with_spaces_are_quoted(tmp_path: Path) -> None:
    script = Path("/Users/u/Library/Application Support/engram/recall_hook/pretooluse.py")
    python = "/Applications/My Python/bin/python3"
    odd = Registration(hook_python=PYTHON, engram_python=python, hook_script=script)
    assert shlex.split(claude.hook(odd, "PreToolUse").command)[-1] == str(odd.hook_script)
    assert shlex.split(claude.hook(odd, "SessionStart").command)[-1] == str(script.with_name("session_start.py"))
    assert claude.server_entry(odd)["command"] == python
    assert is_engram_hook(claude.hook(odd, "PreToolUse").entry())


def test_shims_are_recognised_and_refused(tmp_path: Path, registration: Registration) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3"
    shim.write_text('#!/usr/bin/env bash\nexec pyenv exec "$0" "$@"\n')
    shim.chmod(0o755)
    script_shim = tmp_path / "python-wrapper"
    script_shim.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    script_shim.chmod(0o755)
    assert reg.is_shim(shim) and reg.is_shim(script_shim)
    assert not reg.is_shim(PYTHON) and not reg.is_shim(reg.engram_python())
    assert reg._usable_interpreter(str(shim)) is None
    with pytest.raises(InstallError, match="shim"):
        reg.check_registration(
            Registration(hook_python=str(script_shim), engram_python=PYTHON, hook_script=HOOK)
        )


def test_check_refuses_an_interpreter_without_this_engram(tmp_path: Path) -> None:
    # The base interpreter (no venv) has no Engram installed: its -m commands would fail.
    registration = Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK)
    if reg._imports_this_engram(PYTHON) is None:
        pytest.skip("Engram is installed into the base interpreter here")
    with pytest.raises(InstallError, match="does not import this Engram"):
        reg.check_registration(registration)
    with pytest.raises(InstallError):
        reg.check_registration(Registration(hook_python=PYTHON, engram_python=PYTHON,
                                           hook_script=tmp_path / "missing.py"))


# ---------------------------------------------------------------- plugin layout


def test_plugin_layout_is_generated_from_the_same_source(tmp_path: Path, settings_path: Path, mcp_path: Path,
                                                         registration: Registration) -> None:
    out = tmp_path / "engram-plugin"
    (out / "README.md").parent.mkdir()
    (out / "README.md").write_text("mine")
    written = write_plugin(out, registration)
    assert sorted(p.relative_to(out).as_posix() for p in written) == [
        ".claude-plugin/marketplace.json", ".claude-plugin/plugin.json", ".mcp.json", "hooks/hooks.json"]
    assert (out / "README.md").read_text() == "mine"

    manifest = load(out / ".claude-plugin" / "plugin.json")
    assert manifest["name"] == "engram" and manifest["description"]
    # A one-plugin local marketplace whose plugin is this very folder (checked with the real CLI in
    # tests/e2e/test_claude_cli.py).
    market = load(out / ".claude-plugin" / "marketplace.json")
    assert market["name"] == "engram-local" and market["owner"]["name"]
    assert [(p["name"], p["source"]) for p in market["plugins"]] == [("engram", "./")]
    hooks = load(out / "hooks" / "hooks.json")
    assert hooks["hooks"] == claude.hooks_table(registration)
    mcp = load(out / ".mcp.json")
    assert mcp == {"mcpServers": {"engram": claude.server_entry(registration)}}

    # The same entries `install` puts in settings.json and .claude.json.
    do_install(settings_path, mcp_path, registration)
    settings = load(settings_path)
    for event, groups in hooks["hooks"].items():
        assert groups[0] in settings["hooks"][event]
    assert load(mcp_path)["mcpServers"]["engram"] == mcp["mcpServers"]["engram"]

    # Regenerating is idempotent.
    before = {p: p.read_bytes() for p in written}
    write_plugin(out, registration)
    assert {p: p.read_bytes() for p in written} == before
    assert set(plugin_files(registration)) == {p.relative_to(out) for p in written}


def test_plugin_output_must_be_a_directory(tmp_path: Path, registration: Registration) -> None:
    target = tmp_path / "a-file"
    target.write_text("x")
    with pytest.raises(NotADirectoryError):
        write_plugin(target, registration)


# What Engram 0.1.0 (620a465) wrote, to the letter: install must replace it, uninstall remove it.
V010_LAUNCHER = ('import sys;sys.path.insert(0,sys.argv[1].rpartition("/")[0]);import pretooluse;'
                 'pretooluse.main()')
V010_SETTINGS = {
    "model": "opus",
    "hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "timeout": 10, "command":
                        f"/old/venv/bin/python3 -I -S -c '{V010_LAUNCHER}' /old/checkout/recall_hook/pretooluse.py"}]}],
        "SessionStart": [{"hooks": [{"type": "command", "timeout": 30,
                                     "command": "/old/venv/bin/python -I -m processor.recall.session_start"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "timeout": 5, "command":
                              "/old/venv/bin/python3 -I -S -c 'import sys;sys.path.insert(0,sys.argv[1].rpartition("
                              "\"/\")[0]);import prompt_submit;prompt_submit.main()' "
                              "/old/checkout/recall_hook/prompt_submit.py"}]}],
    },
}
V010_CLAUDE_JSON = {"numStartups": 3, "mcpServers": {"engram": {
    "type": "stdio", "command": "/old/venv/bin/python", "args": ["-I", "-m", "mcp_tools.server"], "env": {}}}}


def test_entries_written_by_engram_0_1_0_are_replaced_by_install_and_removed_by_uninstall(
        claude_dir: Path, registration: Registration) -> None:
    settings_path, mcp_path = claude_dir / "settings.json", claude_dir / ".claude.json"
    settings_path.write_text(json.dumps(V010_SETTINGS, indent=2) + "\n")
    mcp_path.write_text(json.dumps(V010_CLAUDE_JSON, indent=2) + "\n")
    do_install(settings_path, mcp_path, registration)
    hooks = load(settings_path)["hooks"]
    assert hooks["SessionStart"] == [{"hooks": [claude.hook(registration, "SessionStart").entry()]}]
    assert hooks["PreToolUse"] == [{"matcher": "*", "hooks": [claude.hook(registration, "PreToolUse").entry()]}]
    assert hooks["UserPromptSubmit"] == [{"hooks": [claude.hook(registration, "UserPromptSubmit").entry()]}]
    assert "processor.recall.session_start" not in settings_path.read_text()
    assert load(mcp_path)["mcpServers"]["engram"]["command"] == registration.engram_python

    settings_path.write_text(json.dumps(V010_SETTINGS, indent=2) + "\n")
    mcp_path.write_text(json.dumps(V010_CLAUDE_JSON, indent=2) + "\n")
    uninstall(settings_path, mcp_path)
    assert load(settings_path) == {"model": "opus"}
    assert load(mcp_path) == {"numStartups": 3}
