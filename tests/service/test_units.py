"""Service definitions: rendered for real, validated by the real parsers, installed with the right commands."""

from __future__ import annotations

import configparser
import logging
import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor.service import units
from processor.service.resources import EXIT_MEMORY_LIMIT
from processor.service.units import ServiceError

SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-api03-secret-value", "OPENAI_API_KEY": "sk-proj-another-secret"}
PYTHON = os.path.abspath(sys.executable)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "user"), "PATH": f"/usr/local/bin:.:relative/bin:/usr/bin:{tmp_path}/bin",
            **SECRETS}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "user" / ".engram"


class Recorder:
    """A fake runner: records argv, answers with the exit status given per command prefix."""

    def __init__(self, statuses: dict[tuple[str, ...], list[int]] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.statuses = statuses or {}

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        for prefix, codes in self.statuses.items():
            if tuple(argv[: len(prefix)]) == prefix and codes:
                code = codes.pop(0)
                return subprocess.CompletedProcess(list(argv), code, "", f"failed with {code}" if code else "")
        return subprocess.CompletedProcess(list(argv), 0, "ok", "")


def refuse(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"print_only ran {argv}")


def import_check() -> list[str]:
    return [PYTHON, "-P", "-c", "import processor.cli"]


# --- launchd ---


def test_launchd_plist_renders_and_parses_back(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    unit = units.service_file(home, home / "logs", platform="launchd", env=env)
    assert unit.path == tmp_path / "user" / "Library" / "LaunchAgents" / "com.engram.processor.plist"
    plist = plistlib.loads(unit.text.encode())
    assert plist["Label"] == "com.engram.processor"
    assert plist["ProgramArguments"] == [PYTHON, "-m", "processor.cli", "run"]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # restarts after crashes and exit 75
    assert isinstance(plist["ThrottleInterval"], int) and plist["ThrottleInterval"] >= 5
    assert plist["ProcessType"] == "Background"
    assert plist["WorkingDirectory"] == str(home)
    assert plist["StandardOutPath"] == str(home / "logs" / "launchd.stdout.log")
    assert plist["StandardErrorPath"] == str(home / "logs" / "launchd.stderr.log")
    assert plist["EnvironmentVariables"]["ENGRAM_HOME"] == str(home)
    path_entries = plist["EnvironmentVariables"]["PATH"].split(":")
    assert all(os.path.isabs(p) for p in path_entries) and "/usr/local/bin" in path_entries
    assert set(plist["EnvironmentVariables"]) == {"ENGRAM_HOME", "PATH"}
    for key in ("WorkingDirectory", "StandardOutPath", "StandardErrorPath"):
        assert os.path.isabs(plist[key])
    assert os.path.isabs(plist["ProgramArguments"][0]) and os.access(plist["ProgramArguments"][0], os.X_OK)
    for secret in SECRETS.values():
        assert secret not in unit.text


def test_launchd_plist_escapes_odd_paths(tmp_path: Path, env: dict[str, str]) -> None:
    odd = tmp_path / "a & b <c> 'd' \"e\""
    plist = plistlib.loads(units.service_file(odd, odd / "logs", platform="launchd", env=env).text.encode())
    assert plist["WorkingDirectory"] == str(odd)
    assert plist["StandardErrorPath"] == str(odd / "logs" / "launchd.stderr.log")


def test_launchd_install_commands(home: Path, env: dict[str, str]) -> None:
    run = Recorder({("launchctl", "bootout"): [3]})  # "not loaded" on a first install is fine
    result = units.install(home, home / "logs", platform="launchd", run=run, env=env)
    target = f"gui/{os.getuid()}/com.engram.processor"
    assert run.calls == [
        import_check(),
        ["launchctl", "bootout", target],
        ["launchctl", "enable", target],
        ["launchctl", "bootstrap", f"gui/{os.getuid()}", str(result.path)],
    ]
    assert result.path.read_text() == result.text
    assert result.path.stat().st_mode & 0o777 == 0o644
    # launchd opens the log files but will not create their directory.
    assert (home / "logs").is_dir() and (home / "logs").stat().st_mode & 0o777 == 0o700


def test_launchd_bootstrap_is_retried_after_a_racing_bootout(
    home: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(units, "_BOOTSTRAP_RETRY_SECONDS", 0.0)
    run = Recorder({("launchctl", "bootstrap"): [5]})
    units.install(home, home / "logs", platform="launchd", run=run, env=env)
    assert [argv[1] for argv in run.calls if argv[0] == "launchctl"] == ["bootout", "enable", "bootstrap",
                                                                         "bootstrap"]
    with pytest.raises(ServiceError, match="launchctl bootstrap"):
        units.install(home, home / "logs", platform="launchd", env=env,
                      run=Recorder({("launchctl", "bootstrap"): [5, 5, 5]}))


def test_launchd_uninstall_status_restart_logs(home: Path, env: dict[str, str]) -> None:
    units.install(home, home / "logs", platform="launchd", run=Recorder(), env=env)
    target = f"gui/{os.getuid()}/com.engram.processor"
    run = Recorder()
    assert units.status(platform="launchd", run=run, env=env).returncode == 0
    units.restart(platform="launchd", run=run, env=env)
    result = units.uninstall(platform="launchd", run=run, env=env)
    assert run.calls == [["launchctl", "print", target], ["launchctl", "kickstart", "-k", target],
                         ["launchctl", "bootout", target]]
    assert not result.path.exists()
    assert units.logs_command(home / "logs", platform="launchd", lines=50, follow=True) == [
        "tail", "-n", "50", "-F", str(home / "logs" / "engram.log"), str(home / "logs" / "launchd.stderr.log")]


# --- systemd ---


def _read_ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # unit keys are case-sensitive
    parser.read_string(text)
    return parser


def test_systemd_unit_renders_with_the_expected_settings(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    unit = units.service_file(home, home / "logs", platform="systemd", env=env, memory_max_mb=1500, nice=5)
    assert unit.path == tmp_path / "cfg" / "systemd" / "user" / "engram.service"
    ini = _read_ini(unit.text)
    service = ini["Service"]
    assert service["Type"] == "simple"
    assert shlex.split(service["ExecStart"]) == [PYTHON, "-m", "processor.cli", "run"]
    assert service["Restart"] == "on-failure"
    assert int(service["RestartSec"]) >= 5
    assert service["RestartForceExitStatus"] == str(EXIT_MEMORY_LIMIT)
    assert service["MemoryMax"] == "1500M"
    assert service["Nice"] == "5"
    assert service["KillMode"] == "mixed"
    assert service["EnvironmentFile"] == f"-{home}/env"  # optional file: the API keys live there
    assert service["WorkingDirectory"] == str(home)
    assert shlex.split(service["Environment"])[0] == f"ENGRAM_HOME={home}"
    assert ini["Install"]["WantedBy"] == "default.target"
    assert units.parse_unit(unit.text)["Service"]["Type"] == ["simple"]
    for secret in SECRETS.values():
        assert secret not in unit.text
    assert "API_KEY" not in unit.text


def test_xdg_config_home_is_respected_only_when_absolute(tmp_path: Path) -> None:
    assert units.unit_path("systemd", {"HOME": "/h", "XDG_CONFIG_HOME": str(tmp_path)}) == (
        tmp_path / "systemd" / "user" / "engram.service")
    assert units.unit_path("systemd", {"HOME": "/h", "XDG_CONFIG_HOME": "rel"}) == Path(
        "/h/.config/systemd/user/engram.service")
    assert units.unit_path("systemd", {"HOME": "/h"}) == Path("/h/.config/systemd/user/engram.service")


def _verify(unit_file: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    # A user manager needs XDG_RUNTIME_DIR; no unit is started, generators and man pages are skipped.
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", "--man=no", "--generators=no", str(unit_file)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)},
    )


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze not installed (Debian/Ubuntu: apt-get install systemd)",
)


@needs_systemd_analyze
def test_systemd_analyze_accepts_the_unit(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    unit = units.service_file(home, home / "logs", platform="systemd", env=env)
    path = tmp_path / "units" / "engram.service"
    path.parent.mkdir()
    path.write_text(unit.text)
    done = _verify(path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "engram.service" not in done.stderr, done.stderr  # not even a warning about our file


@needs_systemd_analyze
def test_systemd_quoting_survives_odd_paths(tmp_path: Path, env: dict[str, str]) -> None:
    # Spaces, a %-specifier and a $ in the interpreter's path and the home: systemd must still find the
    # executable (verify checks that it exists), so the escaping is what systemd expects.
    odd = tmp_path / "dir with space %h $HOME"
    odd.mkdir()
    (odd / "python").symlink_to(PYTHON)
    unit = units.service_file(odd / "home", odd / "logs", platform="systemd", env=env, python=str(odd / "python"))
    path = tmp_path / "units" / "engram.service"
    path.parent.mkdir()
    path.write_text(unit.text)
    done = _verify(path, tmp_path)
    assert done.returncode == 0, done.stderr + unit.text
    assert "engram.service" not in done.stderr, done.stderr
    # And the same check fails for a unit whose interpreter does not exist: the test has teeth.
    path.write_text(unit.text.replace("python\"", "no-such-python\""))
    assert _verify(path, tmp_path).returncode != 0


def test_systemd_install_commands(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    run = Recorder()
    result = units.install(home, home / "logs", platform="systemd", run=run, env=env)
    assert run.calls == [
        import_check(),
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "engram.service"],
        ["systemctl", "--user", "restart", "engram.service"],  # picks up a changed unit, unlike enable --now
    ]
    assert result.path == tmp_path / "cfg" / "systemd" / "user" / "engram.service"
    assert result.path.read_text() == result.text
    assert any("enable-linger" in note for note in result.notes)


def test_systemd_failure_names_the_command(home: Path, env: dict[str, str]) -> None:
    run = Recorder({("systemctl", "--user", "enable"): [1]})
    with pytest.raises(ServiceError, match="systemctl --user enable engram.service.*failed with 1"):
        units.install(home, home / "logs", platform="systemd", run=run, env=env)


def test_install_refuses_an_interpreter_without_engram(home: Path, env: dict[str, str]) -> None:
    run = Recorder({(PYTHON, "-P"): [1]})
    with pytest.raises(ServiceError, match="cannot import Engram"):
        units.install(home, home / "logs", platform="systemd", run=run, env=env)
    assert run.calls == [import_check()]
    assert not units.unit_path("systemd", env).exists()


def test_systemd_uninstall_status_restart_logs(home: Path, env: dict[str, str]) -> None:
    units.install(home, home / "logs", platform="systemd", run=Recorder(), env=env)
    run = Recorder({("systemctl", "--user", "status"): [3]})
    status = units.status(platform="systemd", run=run, env=env)
    assert status.returncode == 3  # "inactive" is an answer, not an error
    units.restart(platform="systemd", run=run, env=env)
    result = units.uninstall(platform="systemd", run=run, env=env)
    assert run.calls == [
        ["systemctl", "--user", "status", "engram.service", "--no-pager", "--lines=20"],
        ["systemctl", "--user", "restart", "engram.service"],
        ["systemctl", "--user", "disable", "--now", "engram.service"],
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "reset-failed", "engram.service"],
    ]
    assert not result.path.exists()
    units.uninstall(platform="systemd", run=Recorder({("systemctl",): [5, 5, 5]}), env=env)  # not installed
    logs = Recorder()
    units.logs(home / "logs", platform="systemd", lines=20, run=logs, env=env)
    assert logs.calls == [["journalctl", "--user", "-u", "engram.service", "-n", "20", "--no-pager"]]


# --- both ---


@pytest.mark.parametrize("platform", ["launchd", "systemd"])
def test_print_only_touches_nothing(platform: units.Platform, home: Path, env: dict[str, str]) -> None:
    result = units.install(home, home / "logs", platform=platform, print_only=True, run=refuse, env=env)
    assert result.text and result.commands[0] == import_check() and len(result.commands) == 4
    assert not result.path.exists() and not home.exists()
    assert units.uninstall(platform=platform, print_only=True, run=refuse, env=env).commands


def test_interpreter_of_a_venv_is_kept_not_resolved(tmp_path: Path) -> None:
    # A venv's bin/python is a symlink to the base interpreter; following it would lose the venv.
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(PYTHON)
    assert units.python_executable(str(venv_python)) == venv_python
    assert units.python_executable() == Path(PYTHON)
    with pytest.raises(ServiceError):
        units.python_executable(str(tmp_path / "missing"))


def test_pyenv_shim_is_replaced_by_the_real_interpreter(tmp_path: Path) -> None:
    shim = tmp_path / ".pyenv" / "shims" / "python"
    shim.parent.mkdir(parents=True)
    shim.write_text(f'#!/bin/sh\nexec "{PYTHON}" "$@"\n')
    shim.chmod(0o755)
    assert units.python_executable(str(shim)) == Path(PYTHON)


def test_a_secret_inside_a_copied_value_is_refused(home: Path, env: dict[str, str]) -> None:
    env["GITHUB_TOKEN"] = "/opt/ghp_pretend_token"
    env["PATH"] = f"/usr/bin:{env['GITHUB_TOKEN']}"
    with pytest.raises(ServiceError, match="GITHUB_TOKEN"):
        units.service_file(home, home / "logs", platform="systemd", env=env)


def test_templates_ship_in_the_package_and_the_top_level_folders_show_them() -> None:
    repo = Path(__file__).resolve().parents[2]
    for platform, name in units.TEMPLATES.items():
        text = (units.TEMPLATE_DIR / name).read_text()
        assert (repo / platform / name).read_text() == text  # launchd/ and systemd/ link to the shipped file
        assert "{" in text, platform
        assert "sk-" not in text and "API_KEY=" not in text
    with pytest.raises(ServiceError, match="template"):
        units.template_text("systemd", Path("/nonexistent"))


def test_detect_platform() -> None:
    assert units.detect_platform("darwin") == "launchd"
    assert units.detect_platform("linux") == "systemd"
    with pytest.raises(ServiceError):
        units.detect_platform("win32")


def test_load_env_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "env"
    path.write_text(
        "# keys for the processor\n"
        "ANTHROPIC_API_KEY=sk-ant-file\n"
        "export OPENAI_API_KEY='sk-openai-file'\n"
        "ALREADY=from-file\n"
        "not a line\n"
        "\n"
    )
    path.chmod(0o644)
    environ = {"ALREADY": "from-shell"}
    with caplog.at_level(logging.WARNING):
        loaded = units.load_env_file(path, environ)
    assert loaded == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]
    assert environ == {"ALREADY": "from-shell", "ANTHROPIC_API_KEY": "sk-ant-file", "OPENAI_API_KEY": "sk-openai-file"}
    assert "chmod 600" in caplog.text and "line 5" in caplog.text
    assert "sk-ant-file" not in caplog.text
    assert units.load_env_file(tmp_path / "missing", environ) == []
