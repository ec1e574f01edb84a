"""`engram install` / `uninstall` for the Codex CLI: Engram's hooks, the hooks' trust and the MCP server merged into
the user's own `config.toml` and `hooks.json`, idempotently, with backups, removed byte for byte; invalid files left
untouched with one clear error."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from processor.install import codex
from processor.install.codex_config import BLOCK_START
from processor.install.codex_trust import engram_hooks, trust_hash, untrusted
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()

USER_CONFIG_TOML = '''# My Codex setup
model = "o3"   # the good one
model_provider = "corp"

[model_providers.corp]
name = "Corp proxy"
base_url = "https://llm.example.com/v1"
env_key = "CORP_KEY"

[mcp_servers.github]
command = "npx"
args = ["-y", "@github/mcp"]
env = { GITHUB_TOKEN = "ghp_SECRETSECRETSECRET" }

[projects."/home/u/shop-api"]
trust_level = "trusted"

[hooks.state."/home/u/.codex/hooks.json:stop:0:0"]
trusted_hash = "sha256:0000"
'''

USER_HOOKS_JSON = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
                             "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}]}}

@pytest.fixture
def codex_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "codex-home"
    folder.mkdir()
    (folder / "config.toml").write_text(USER_CONFIG_TOML)
    (folder / "hooks.json").write_text(json.dumps(USER_HOOKS_JSON, indent=2) + "\n")
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if ".engram-backup-" not in p.name}



def test_codex_install_adds_hooks_trust_and_server_and_keeps_everything_else(codex_dir: Path,
                                                                              registration: Registration) -> None:
    report = codex.install(registration, codex_dir=codex_dir)
    assert report.changed and not report.dry_run
    hooks = json.loads((codex_dir / "hooks.json").read_text())
    assert hooks["hooks"]["Stop"] == USER_HOOKS_JSON["hooks"]["Stop"]
    assert hooks["hooks"]["PreToolUse"][0] == USER_HOOKS_JSON["hooks"]["PreToolUse"][0]
    [start] = [h for g in hooks["hooks"]["SessionStart"] for h in g["hooks"]]
    [pre] = [h for g in hooks["hooks"]["PreToolUse"][1:] for h in g["hooks"]]
    assert start["command"].endswith("recall_hook/session_start.py codex") and start["timeout"] == 30
    assert pre["command"].endswith("recall_hook/pretooluse.py codex")
    assert hooks["hooks"]["PreToolUse"][1]["matcher"] == "*"
    [failure] = hooks["hooks"]["PostToolUse"]  # a failed shell command: the fix of the same failure
    assert failure["matcher"] == "Bash" and failure["hooks"][0]["command"].endswith("recall_hook/tool_failure.py codex")
    text = (codex_dir / "config.toml").read_text()
    assert text.startswith(USER_CONFIG_TOML)  # the user's file, untouched, then Engram's block
    config = tomllib.loads(text)
    assert config["mcp_servers"]["github"]["env"] == {"GITHUB_TOKEN": "ghp_SECRETSECRETSECRET"}
    assert config["mcp_servers"]["engram"] == {"command": PYTHON, "args": ["-I", "-m", "mcp_tools.bridge"],
                                               "env_vars": ["ENGRAM_HOME", "XDG_DATA_HOME"]}
    mine = engram_hooks(hooks, codex_dir / "hooks.json")
    assert [h.event for h in mine] == ["PreToolUse", "SessionStart", "PostToolUse"]
    assert mine[0].key == f"{codex_dir}/hooks.json:pre_tool_use:1:0"  # the user's group keeps index 0
    for hook in mine:
        assert config["hooks"]["state"][hook.key]["trusted_hash"] == hook.hash
    assert config["hooks"]["state"]["/home/u/.codex/hooks.json:stop:0:0"] == {"trusted_hash": "sha256:0000"}
    assert untrusted(config, mine) == []
    # Secrets elsewhere in the file never reach the printed change.
    assert "ghp_" not in report.describe() and "CORP_KEY" not in report.describe()
    assert any("trust" in note for note in report.notes)
    # config.toml's diff shows the TOML lines written, not a Python dict of them.
    assert "+[mcp_servers.engram]\n" in report.describe() and "{'command'" not in report.describe()


def test_codex_uninstall_gives_both_files_back_byte_for_byte(codex_dir: Path, registration: Registration) -> None:
    original = files(codex_dir)
    codex.install(registration, codex_dir=codex_dir)
    assert files(codex_dir) != original
    report = codex.uninstall(codex_dir=codex_dir)
    assert report.changed
    assert files(codex_dir) == original
    assert not codex.uninstall(codex_dir=codex_dir).changed


@pytest.mark.parametrize("config", ["", 'model = "o3"', 'model = "o3"\n\n\n', "[a]\nb = 1\n",
                                    '[mcp_servers.other]\ncommand = "x"\n'])
def test_codex_round_trip_is_exact_for_any_ending(tmp_path: Path, registration: Registration, config: str) -> None:
    (tmp_path / "config.toml").write_text(config)
    codex.install(registration, codex_dir=tmp_path)
    tomllib.loads((tmp_path / "config.toml").read_text())
    codex.uninstall(codex_dir=tmp_path)
    assert (tmp_path / "config.toml").read_text() == config


def test_codex_install_twice_is_install_once(codex_dir: Path, registration: Registration) -> None:
    codex.install(registration, codex_dir=codex_dir)
    first = files(codex_dir)
    backups = sorted(p.name for p in codex_dir.iterdir() if ".engram-backup-" in p.name)
    again = codex.install(registration, codex_dir=codex_dir)
    assert not again.changed and files(codex_dir) == first
    assert sorted(p.name for p in codex_dir.iterdir() if ".engram-backup-" in p.name) == backups
    assert len(backups) == 2  # one of each file, before the first write


def test_codex_reinstall_with_another_interpreter_refreshes_its_trust(codex_dir: Path, tmp_path: Path,
                                                                     registration: Registration) -> None:
    codex.install(registration, codex_dir=codex_dir)
    moved = Registration(hook_python="/opt/py/bin/python3", engram_python="/opt/py/bin/python3",
                         hook_script=registration.hook_script)
    codex.install(moved, codex_dir=codex_dir)
    text = (codex_dir / "config.toml").read_text()
    assert text.count(BLOCK_START) == 1
    config = tomllib.loads(text)
    hooks = engram_hooks(json.loads((codex_dir / "hooks.json").read_text()), codex_dir / "hooks.json")
    assert all("/opt/py/bin/python3" in json.dumps(json.loads((codex_dir / "hooks.json").read_text()))
               for _ in hooks) and untrusted(config, hooks) == []
    codex.uninstall(codex_dir=codex_dir)
    assert (codex_dir / "config.toml").read_text() == USER_CONFIG_TOML


def test_codex_trust_recorded_elsewhere_is_replaced_and_removed(codex_dir: Path, registration: Registration) -> None:
    """Trust Codex itself wrote for an Engram hook (the user trusted it in /hooks) is Engram's to manage."""
    key = f"{codex_dir}/hooks.json:session_start:0:0"
    (codex_dir / "hooks.json").write_text("{}\n")
    with open(codex_dir / "config.toml", "a") as f:
        f.write(f'\n[hooks.state."{key}"]\ntrusted_hash = "sha256:stale"\n')
    codex.install(registration, codex_dir=codex_dir)
    config = tomllib.loads((codex_dir / "config.toml").read_text())
    assert config["hooks"]["state"][key]["trusted_hash"] != "sha256:stale"
    codex.uninstall(codex_dir=codex_dir)
    assert key not in tomllib.loads((codex_dir / "config.toml").read_text()).get("hooks", {}).get("state", {})


def test_codex_no_trust_leaves_trust_to_the_user(codex_dir: Path, registration: Registration) -> None:
    report = codex.install(registration, codex_dir=codex_dir, trust=False)
    config = tomllib.loads((codex_dir / "config.toml").read_text())
    hooks = engram_hooks(json.loads((codex_dir / "hooks.json").read_text()), codex_dir / "hooks.json")
    assert len(untrusted(config, hooks)) == 3
    assert any("/hooks" in note for note in report.notes)


@pytest.mark.parametrize("bad", ['model = "o3\n', "[a]\nb = 1\n[a]\nb = 2\n", "x = [1, 2\n"])
def test_invalid_codex_config_is_an_error_and_nothing_is_written(codex_dir: Path, registration: Registration,
                                                                bad: str) -> None:
    (codex_dir / "config.toml").write_text(bad)
    before = files(codex_dir)
    with pytest.raises(InstallError, match=r"config\.toml: invalid TOML .*fix or move the file aside"):
        codex.install(registration, codex_dir=codex_dir)
    assert files(codex_dir) == before
    with pytest.raises(InstallError):
        codex.uninstall(codex_dir=codex_dir)
    assert files(codex_dir) == before


def test_invalid_codex_hooks_json_is_an_error_and_nothing_is_written(codex_dir: Path,
                                                                    registration: Registration) -> None:
    (codex_dir / "hooks.json").write_text('{"hooks": {')
    before = files(codex_dir)
    with pytest.raises(InstallError, match=r"hooks\.json: invalid JSON at line 1"):
        codex.install(registration, codex_dir=codex_dir)
    assert files(codex_dir) == before


def test_a_foreign_codex_server_named_engram_is_refused(codex_dir: Path, registration: Registration) -> None:
    with open(codex_dir / "config.toml", "a") as f:
        f.write('\n[mcp_servers.engram]\ncommand = "other-memory-tool"\n')
    before = files(codex_dir)
    with pytest.raises(InstallError, match="not Engram's.*codex mcp remove engram"):
        codex.install(registration, codex_dir=codex_dir)
    assert files(codex_dir) == before


def test_codex_trust_hash_is_codexs_fingerprint() -> None:
    """The hashes Codex 0.171.0's app-server reported (hooks/list) for two hooks of a hooks.json."""
    command = ("cat > /tmp/explore/hook-SessionStart-$$.json; echo '{\"hookSpecificOutput\":{\"hookEventName\":"
               "\"SessionStart\",\"additionalContext\":\"START-CONTEXT-XYZ\"}}'")
    assert trust_hash("SessionStart", None, {"type": "command", "command": command}) == \
        "sha256:c030761de14b9d4c7d0e9adbe6670440277842ff10e7228c27422a1fc0a9a8c7"


def test_codex_files_are_created_private_when_missing(tmp_path: Path, registration: Registration) -> None:
    folder = tmp_path / "fresh-codex"
    codex.install(registration, codex_dir=folder)
    for name in ("hooks.json", "config.toml"):
        assert (folder / name).stat().st_mode & 0o777 == 0o600
    assert (folder / "config.toml").read_text().startswith("# >>> engram: added by `engram install`, which created")
    codex.uninstall(codex_dir=folder)
    assert not folder.exists()  # both files and their folder made by install, nothing left behind (no backup)


# ---------------------------------------------------------------- Gemini
