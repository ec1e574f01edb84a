"""Service definitions: render, install and drive the launchd agent (macOS) or systemd user unit (Linux).

The CLI's ``engram service install|uninstall|status|logs|restart`` are thin wrappers over
``install()``, ``uninstall()``, ``status()``, ``logs()``/``logs_command()`` and ``restart()``. Every
function that changes the system runs its commands through ``run`` (a plain function parameter,
default ``run_command``), and ``print_only=True`` renders and validates without writing a file or
running anything.

The templates ship inside the package (``processor/service/templates/``; the source tree's
``launchd/`` and ``systemd/`` folders link to them), filled with ``str.format``. Every path in them is absolute, because
neither launchd nor systemd runs a login shell: the interpreter is the one running this code (a venv's
``bin/python`` is kept as is, since resolving its symlink would lose the venv; a pyenv shim is asked
for the real interpreter). API keys never go into a definition: the systemd unit names an optional
``EnvironmentFile`` ($ENGRAM_HOME/env) and, because launchd has no such thing, the processor loads the
same file itself at start-up with ``load_env_file()``.
"""

from __future__ import annotations

import logging
import os
import plistlib
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape as xml_escape

from processor.config import DISTRIBUTION, Settings
from processor.files import ensure_private_dir, write_atomic
from processor.service.pidfile import EXIT_ALREADY_RUNNING
from processor.service.resources import EXIT_MEMORY_LIMIT

log = logging.getLogger(__name__)

Platform = Literal["launchd", "systemd"]
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

LAUNCHD_LABEL = "com.engram.processor"
SYSTEMD_UNIT = "engram.service"
ENV_FILE_NAME = "env"
LOG_FILE_NAME = "engram.log"
LAUNCHD_STDOUT_NAME = "launchd.stdout.log"
LAUNCHD_STDERR_NAME = "launchd.stderr.log"

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATES: dict[Platform, str] = {
    "launchd": f"{LAUNCHD_LABEL}.plist",
    "systemd": SYSTEMD_UNIT,
}

# Names whose values must never be copied into a service definition.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BOOTSTRAP_ATTEMPTS = 3
_BOOTSTRAP_RETRY_SECONDS = 0.5


class ServiceError(Exception):
    """A service definition cannot be rendered or installed; the message says what to do."""


@dataclass(frozen=True)
class ServiceFile:
    platform: Platform
    path: Path  # where it is (or would be) installed
    text: str
    arguments: list[str]  # the command the service runs


@dataclass
class ServiceResult:
    platform: Platform
    path: Path
    commands: list[list[str]] = field(default_factory=list)  # run, or with print_only: would run
    text: str = ""  # the rendered definition (install)
    output: str = ""  # what the commands printed
    returncode: int = 0  # of the last command
    notes: list[str] = field(default_factory=list)


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The default runner: run ``argv`` and capture its output; never raises for a non-zero exit."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: timed out")


# --- what to run -------------------------------------------------------------------------------


def detect_platform(sys_platform: str | None = None) -> Platform:
    name = sys_platform or sys.platform
    if name == "darwin":
        return "launchd"
    if name.startswith("linux"):
        return "systemd"
    raise ServiceError(f"no service manager support for {name}; run `engram run` under your own supervisor")


def python_executable(executable: str | None = None) -> Path:
    """The absolute interpreter for the service: ``executable`` or the running one.

    Made absolute but deliberately not symlink-resolved: a venv's ``bin/python`` is a symlink to the
    base interpreter, and following it would start Python outside the venv. A pyenv shim (a shell
    script that picks a version from the working directory) is replaced by the interpreter it runs.
    """
    raw = executable or sys.executable
    if not raw:
        raise ServiceError("cannot tell which Python runs Engram; pass the interpreter explicitly")
    path = Path(os.path.abspath(os.path.expanduser(raw)))
    if "shims" in path.parts:
        done = subprocess.run([str(path), "-c", "import sys; print(sys.executable)"],
                              capture_output=True, text=True, timeout=60, cwd=Path.home())
        real = done.stdout.strip()
        if done.returncode != 0 or not real or "shims" in Path(real).parts:
            raise ServiceError(f"{path} is a version-manager shim and did not name a real interpreter; "
                               "pass the interpreter's absolute path")
        path = Path(real)
    if not os.access(path, os.X_OK):
        raise ServiceError(f"{path} is not an executable Python interpreter")
    return path


def program_arguments(python: Path) -> list[str]:
    return [str(python), "-m", "processor.cli", "run"]


def service_environment(home: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables a service definition sets: ENGRAM_HOME, and PATH so the ``claude`` CLI is found
    (launchd's default PATH is /usr/bin:/bin:/usr/sbin:/sbin). Relative PATH entries are dropped: the
    service's working directory must not decide what runs. Nothing else is copied, secrets least of all.
    """
    entries: list[str] = []
    for entry in env.get("PATH", "").split(os.pathsep):
        if os.path.isabs(entry) and entry not in entries:
            entries.append(entry)
    for fallback in ("/usr/local/bin", "/usr/bin", "/bin"):
        if fallback not in entries:
            entries.append(fallback)
    return {"ENGRAM_HOME": str(home), "PATH": os.pathsep.join(entries)}


def unit_path(platform: Platform, env: Mapping[str, str] | None = None) -> Path:
    """Where the definition is installed: ~/Library/LaunchAgents or $XDG_CONFIG_HOME/systemd/user."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    if platform == "launchd":
        return home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    config = env.get("XDG_CONFIG_HOME") or ""
    # The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    base = Path(config) if os.path.isabs(config) else home / ".config"
    return base / "systemd" / "user" / SYSTEMD_UNIT


def template_text(platform: Platform, template_dir: Path | None = None) -> str:
    path = (template_dir or TEMPLATE_DIR) / TEMPLATES[platform]
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServiceError(f"service template {path} is missing ({exc}); reinstall Engram (`pip install "
                           f"--force-reinstall {DISTRIBUTION}`, or `pip install -e .` in its clone)") from None


# --- rendering ---------------------------------------------------------------------------------


def _require_absolute(what: str, value: str | Path) -> str:
    text = str(value)
    if not os.path.isabs(text):
        raise ServiceError(f"{what} must be an absolute path, got {text!r}")
    if "\n" in text or "\r" in text or "\0" in text:
        raise ServiceError(f"{what} contains a line break or NUL: {text!r}")
    return text


def render_launchd(
    *,
    arguments: Sequence[str],
    home: Path,
    logs_dir: Path,
    environment: Mapping[str, str],
    label: str = LAUNCHD_LABEL,
    throttle_interval: int = 10,
    exit_timeout: int = 30,
    template_dir: Path | None = None,
) -> str:
    """The LaunchAgent plist, validated by parsing it back with plistlib."""
    _require_absolute("the interpreter", arguments[0])
    indent = " " * 8
    values = {
        "label": xml_escape(label),
        "program_arguments": "\n".join(f"{indent}<string>{xml_escape(arg)}</string>" for arg in arguments),
        "working_directory": xml_escape(_require_absolute("ENGRAM_HOME", home)),
        "environment": "\n".join(
            f"{indent}<key>{xml_escape(k)}</key>\n{indent}<string>{xml_escape(v)}</string>"
            for k, v in sorted(environment.items())
        ),
        "memory_exit_code": EXIT_MEMORY_LIMIT,
        "already_running_exit_code": EXIT_ALREADY_RUNNING,
        "throttle_interval": int(throttle_interval),
        "exit_timeout": int(exit_timeout),
        "stdout_path": xml_escape(_require_absolute("the log directory", logs_dir / LAUNCHD_STDOUT_NAME)),
        "stderr_path": xml_escape(_require_absolute("the log directory", logs_dir / LAUNCHD_STDERR_NAME)),
    }
    text = template_text("launchd", template_dir).format(**values)
    try:
        parsed = plistlib.loads(text.encode("utf-8"))
    except Exception as exc:  # plistlib raises ExpatError, ValueError, ... for a broken document
        raise ServiceError(f"the rendered launchd plist is invalid: {exc}") from None
    if parsed.get("Label") != label or parsed.get("ProgramArguments") != list(arguments):
        raise ServiceError("the rendered launchd plist does not say what was asked; check the template")
    return text


def _systemd_specifiers(value: str) -> str:
    return value.replace("%", "%%")  # systemd expands %h, %u, ... in most settings


def _systemd_exec_arg(arg: str, *, command: bool = False) -> str:
    # ExecStart= splits on whitespace, honours C-style quotes and expands %-specifiers everywhere, and
    # $VAR in the arguments but not in the command itself (systemd.service(5)), so "$" is doubled only
    # in the arguments.
    arg = _systemd_specifiers(arg)
    if not command:
        arg = arg.replace("$", "$$")
    if arg and re.fullmatch(r"[A-Za-z0-9_@%+=:,./$-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(
    *,
    arguments: Sequence[str],
    home: Path,
    environment: Mapping[str, str],
    env_file: Path,
    restart_sec: int = Settings.service_restart_seconds.default,
    memory_max_mb: int = Settings.service_memory_max_mb.default,
    nice: int = Settings.service_nice.default,
    stop_timeout: int = 30,
    template_dir: Path | None = None,
) -> str:
    """The systemd user unit, validated by parsing its [Service] section back."""
    _require_absolute("the interpreter", arguments[0])
    for name, value in environment.items():
        if not _ENV_NAME.fullmatch(name) or "\n" in value or "\0" in value:
            raise ServiceError(f"environment variable {name!r} cannot go into a unit file")
    env_items = " ".join(
        '"' + _systemd_specifiers(f"{k}={v}").replace("\\", "\\\\").replace('"', '\\"') + '"'
        for k, v in sorted(environment.items())
    )
    values = {
        "exec_start": " ".join(_systemd_exec_arg(arg, command=i == 0) for i, arg in enumerate(arguments)),
        "working_directory": _systemd_specifiers(_require_absolute("ENGRAM_HOME", home)),
        "environment": env_items,
        "env_file": _systemd_specifiers(_require_absolute("the environment file", env_file)),
        "restart_sec": int(restart_sec),
        "memory_exit_code": EXIT_MEMORY_LIMIT,
        "already_running_exit_code": EXIT_ALREADY_RUNNING,
        "memory_max_mb": int(memory_max_mb),
        "nice": int(nice),
        "stop_timeout": int(stop_timeout),
    }
    if not -20 <= values["nice"] <= 19:
        raise ServiceError(f"nice must be between -20 and 19, got {nice}")
    text = template_text("systemd", template_dir).format(**values)
    service = parse_unit(text).get("Service", {})
    exec_start = service.get("ExecStart", [""])[-1]
    if service.get("Type") != ["simple"] or not shlex.split(exec_start)[0].startswith("/"):
        raise ServiceError("the rendered systemd unit has no absolute ExecStart; check the template")
    return text


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file as {section: {key: [values in order]}} (keys may repeat in units)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if current is None or not sep:
            raise ServiceError(f"unit line {number} is not 'Key=value' inside a [Section]: {raw!r}")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _check_no_secrets(text: str, env: Mapping[str, str]) -> None:
    # Belt and braces: the templates take no secrets, but a secret could still arrive inside PATH or a
    # path. Refuse to write any definition containing the value of a KEY/TOKEN/SECRET-like variable.
    for name, value in env.items():
        if _SECRET_NAME.search(name) and len(value) >= 8 and value in text:
            raise ServiceError(f"the service definition would contain the value of ${name}; refusing")


def service_file(
    home: Path,
    logs_dir: Path,
    *,
    platform: Platform | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    restart_sec: int = Settings.service_restart_seconds.default,
    memory_max_mb: int = Settings.service_memory_max_mb.default,
    nice: int = Settings.service_nice.default,
    template_dir: Path | None = None,
) -> ServiceFile:
    """Render the definition for this machine (nothing is written)."""
    env = os.environ if env is None else env
    platform = platform or detect_platform()
    home = Path(os.path.abspath(home))
    logs_dir = Path(os.path.abspath(logs_dir))
    arguments = program_arguments(python_executable(python))
    environment = service_environment(home, env)
    if platform == "launchd":
        text = render_launchd(arguments=arguments, home=home, logs_dir=logs_dir, environment=environment,
                              throttle_interval=restart_sec, template_dir=template_dir)
    else:
        text = render_systemd(arguments=arguments, home=home, environment=environment,
                              env_file=home / ENV_FILE_NAME, restart_sec=restart_sec,
                              memory_max_mb=memory_max_mb, nice=nice, template_dir=template_dir)
    _check_no_secrets(text, env)
    return ServiceFile(platform, unit_path(platform, env), text, arguments)


# --- driving the service manager ---------------------------------------------------------------


def _launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def _run(result: ServiceResult, run: Runner, argv: list[str], *, check: bool = True) -> int:
    result.commands.append(argv)
    done = run(argv)
    output = "\n".join(part.strip() for part in (done.stdout, done.stderr) if part and part.strip())
    if output:
        result.output = f"{result.output}\n{output}".strip()
    result.returncode = done.returncode
    if check and done.returncode != 0:
        raise ServiceError(f"`{shlex.join(argv)}` failed with exit status {done.returncode}: {output or 'no output'}")
    return done.returncode


def install(
    home: Path,
    logs_dir: Path,
    *,
    platform: Platform | None = None,
    print_only: bool = False,
    run: Runner = run_command,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    restart_sec: int = Settings.service_restart_seconds.default,
    memory_max_mb: int = Settings.service_memory_max_mb.default,
    nice: int = Settings.service_nice.default,
    template_dir: Path | None = None,
) -> ServiceResult:
    """Write the definition and (re)start the service so that the new definition is the one running.

    launchd: bootout (if loaded) + enable + bootstrap. systemd: daemon-reload + enable + restart
    (``enable --now`` would leave an already running old definition in place).
    """
    unit = service_file(home, logs_dir, platform=platform, python=python, env=env, restart_sec=restart_sec,
                        memory_max_mb=memory_max_mb, nice=nice, template_dir=template_dir)
    result = ServiceResult(unit.platform, unit.path, text=unit.text)
    python_path = unit.arguments[0]
    # Without -P the check would import from the current directory, which the service never sees.
    check = [python_path, "-P", "-c", "import processor.cli"]
    if unit.platform == "launchd":
        target = f"{_launchd_domain()}/{LAUNCHD_LABEL}"
        steps = [(["launchctl", "bootout", target], False), (["launchctl", "enable", target], True),
                 (["launchctl", "bootstrap", _launchd_domain(), str(unit.path)], True)]
    else:
        steps = [(["systemctl", "--user", "daemon-reload"], True),
                 (["systemctl", "--user", "enable", SYSTEMD_UNIT], True),
                 (["systemctl", "--user", "restart", SYSTEMD_UNIT], True)]
        result.notes.append("to keep Engram running while you are logged out: loginctl enable-linger $USER")
    if print_only:
        result.commands = [check] + [argv for argv, _ in steps]
        return result
    if _run(result, run, check, check=False) != 0:
        raise ServiceError(f"{python_path} cannot import Engram ({result.output[-300:]}); install it into that "
                           "interpreter (pip install -e .) or pass the right one")
    result.output = ""
    ensure_private_dir(Path(os.path.abspath(home)))
    ensure_private_dir(Path(os.path.abspath(logs_dir)))  # launchd does not create log directories
    unit.path.parent.mkdir(parents=True, exist_ok=True)
    write_unit_file(unit.path, unit.text)
    for argv, must_succeed in steps:
        if argv[:2] == ["launchctl", "bootstrap"]:
            _bootstrap(result, run, argv)
        else:
            _run(result, run, argv, check=must_succeed)
    return result


def _bootstrap(result: ServiceResult, run: Runner, argv: list[str]) -> None:
    # bootout returns before the job is fully gone; bootstrap right after it can fail with
    # "5: Input/output error". A short pause and another try is the known remedy.
    for attempt in range(_BOOTSTRAP_ATTEMPTS):
        last = attempt + 1 == _BOOTSTRAP_ATTEMPTS
        if _run(result, run, argv, check=last) == 0:
            return
        time.sleep(_BOOTSTRAP_RETRY_SECONDS)


def uninstall(
    *,
    platform: Platform | None = None,
    print_only: bool = False,
    run: Runner = run_command,
    env: Mapping[str, str] | None = None,
) -> ServiceResult:
    """Stop and disable the service and remove its definition. Safe when it is not installed."""
    platform = platform or detect_platform()
    path = unit_path(platform, env)
    result = ServiceResult(platform, path)
    if platform == "launchd":
        steps = [["launchctl", "bootout", f"{_launchd_domain()}/{LAUNCHD_LABEL}"]]
        after: list[list[str]] = []
    else:
        steps = [["systemctl", "--user", "disable", "--now", SYSTEMD_UNIT]]
        after = [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "reset-failed", SYSTEMD_UNIT]]
    if print_only:
        result.commands = steps + after
        return result
    for argv in steps:
        _run(result, run, argv, check=False)  # "not loaded" is fine: the goal is "not running"
    if path.exists() or path.is_symlink():
        path.unlink()
        result.notes.append(f"removed {path}")
    for argv in after:
        _run(result, run, argv, check=False)
    return result


def status(
    *, platform: Platform | None = None, run: Runner = run_command, env: Mapping[str, str] | None = None
) -> ServiceResult:
    """The service manager's view; ``returncode`` non-zero usually means "not running" (not an error)."""
    platform = platform or detect_platform()
    result = ServiceResult(platform, unit_path(platform, env))
    if not result.path.exists():
        result.notes.append(f"not installed ({result.path} does not exist); run `engram service install`")
    if platform == "launchd":
        argv = ["launchctl", "print", f"{_launchd_domain()}/{LAUNCHD_LABEL}"]
    else:
        argv = ["systemctl", "--user", "status", SYSTEMD_UNIT, "--no-pager", "--lines=20"]
    _run(result, run, argv, check=False)
    return result


def restart(
    *, platform: Platform | None = None, run: Runner = run_command, env: Mapping[str, str] | None = None
) -> ServiceResult:
    platform = platform or detect_platform()
    result = ServiceResult(platform, unit_path(platform, env))
    if platform == "launchd":
        argv = ["launchctl", "kickstart", "-k", f"{_launchd_domain()}/{LAUNCHD_LABEL}"]
    else:
        argv = ["systemctl", "--user", "restart", SYSTEMD_UNIT]
    _run(result, run, argv)
    return result


def logs_command(logs_dir: Path, *, platform: Platform | None = None, lines: int = 200,
                 follow: bool = False) -> list[str]:
    """The command that shows the service's logs; run it with inherited stdio to follow."""
    platform = platform or detect_platform()
    if platform == "systemd":
        argv = ["journalctl", "--user", "-u", SYSTEMD_UNIT, "-n", str(int(lines)), "--no-pager"]
        return argv + ["-f"] if follow else argv
    files = [str(logs_dir / LOG_FILE_NAME), str(logs_dir / LAUNCHD_STDERR_NAME)]
    return ["tail", "-n", str(int(lines)), *(["-F"] if follow else []), *files]


def logs(logs_dir: Path, *, platform: Platform | None = None, lines: int = 200,
         run: Runner = run_command, env: Mapping[str, str] | None = None) -> ServiceResult:
    """The last ``lines`` log lines, captured (for following, exec ``logs_command(follow=True)``)."""
    platform = platform or detect_platform()
    result = ServiceResult(platform, unit_path(platform, env))
    _run(result, run, logs_command(logs_dir, platform=platform, lines=lines), check=False)
    return result


# --- the environment file ----------------------------------------------------------------------


def load_env_file(path: Path, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Load ``KEY=value`` lines (API keys) into ``environ`` (default os.environ); returns the names set.

    For launchd, which has no EnvironmentFile; harmless under systemd, which already loaded the file.
    Variables already set win, so ``ENGRAM_...=x engram run`` in a terminal still overrides the file.
    Accepts ``# comments``, blank lines, ``export KEY=value`` and single or double quotes around a
    value. Values are never logged.
    """
    target = os.environ if environ is None else environ
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return []
    if st.st_mode & 0o077:
        log.warning("%s holds secrets but other users can read it; run: chmod 600 %s", path, path)
    loaded: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not _ENV_NAME.fullmatch(name):
            log.warning("%s line %d is not KEY=value; ignored", path, number)
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if name not in target:
            target[name] = value
            loaded.append(name)
    return loaded


def write_unit_file(path: Path, text: str) -> None:
    write_atomic(path, text, mode=0o644)  # service managers read it; it holds no secrets
