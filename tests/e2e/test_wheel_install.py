"""A non-editable install works from its own files: service units render, the hooks and `engram mcp` run.

The wheel is built from a copy of the tree and installed, without its dependencies, into a fresh
venv that borrows this environment's site-packages for them (through a plain path .pth line, so this
environment's editable install of Engram is not loaded). Every command runs outside the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from processor.store import open_store, write_transaction
from processor.store.episodes import NewEpisode, insert_episode

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], *, cwd: Path, env: dict[str, str], stdin: bytes = b"", timeout: float = 120):
    return subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv holding the installed wheel."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                  ".pytest_cache", ".ruff_cache", "test-artifacts"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = (root / "dist").glob("engram_recall-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    # A bare path line: the dependencies become importable, but that folder's .pth files (this
    # environment's editable Engram) are not run.
    (site / "zz_engram_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return venv


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "PYTHON"))}
    environ.update({"HOME": str(tmp_path / "user"), "ENGRAM_HOME": str(tmp_path / "user" / ".engram"),
                    "ENGRAM_MODELS_DIR": os.environ["ENGRAM_MODELS_DIR"]})
    (tmp_path / "user").mkdir()
    return environ


def test_the_package_is_loaded_from_the_install_not_the_source_tree(installed: Path, env: dict[str, str],
                                                                    tmp_path: Path) -> None:
    out = run([str(installed / "bin" / "python"), "-c", "import processor, recall_hook, mcp_tools; "
               "print(processor.__file__, recall_hook.__file__, mcp_tools.__file__)"], cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert all(path.startswith(str(installed)) for path in out.stdout.decode().split()), out.stdout


def test_both_service_units_render(installed: Path, env: dict[str, str], tmp_path: Path) -> None:
    script = ("import sys; from pathlib import Path; from processor.service import units\n"
              "for platform in ('launchd', 'systemd'):\n"
              "    f = units.service_file(Path(sys.argv[1]), Path(sys.argv[1]) / 'logs', platform=platform)\n"
              "    print(platform, len(f.text), f.arguments[0])\n")
    out = run([str(installed / "bin" / "python"), "-c", script, env["ENGRAM_HOME"]], cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["launchd", "systemd"]
    assert all(int(line.split()[1]) > 200 for line in lines)
    printed = run([str(installed / "bin" / "engram"), "service", "install", "--print"], cwd=tmp_path, env=env)
    assert printed.returncode == 0, printed.stderr
    assert b"engram" in printed.stdout and b"{" not in printed.stdout.split(b"\n", 1)[0]


def test_the_viewer_templates_and_static_files_ship_in_the_install(installed: Path, env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    script = ("from importlib import resources; import processor.viewer.app as app\n"
              "from processor.config import SettingsHolder, load_settings\n"
              "viewer = app.Viewer(SettingsHolder(load_settings()), lambda conn: None)\n"
              "print(app.__file__)\n"
              "print(len(viewer.render('reviews.html', title='Reviews', reviews=[], done='', read_only=False)))\n"
              "for name in ('viewer.css', 'viewer.js', 'icon.svg'):\n"
              "    print(name, len(resources.files('processor.viewer').joinpath('static', name).read_bytes()))\n")
    out = run([str(installed / "bin" / "python"), "-c", script], cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert lines[0].startswith(str(installed)) and int(lines[1]) > 500
    assert [line.split()[0] for line in lines[2:]] == ["viewer.css", "viewer.js", "icon.svg"]
    assert all(int(line.split()[1]) > 100 for line in lines[2:])


def test_the_hooks_run_from_the_install(installed: Path, env: dict[str, str], tmp_path: Path) -> None:
    registration = run([str(installed / "bin" / "python"), "-c",
                        "import json; from processor.install import claude; "
                        "from processor.install.registration import default_registration as r; "
                        "specs = claude.hook_specs(r()); print(json.dumps({h.event: h.command for h, _ in specs}))"],
                       cwd=tmp_path, env=env)
    assert registration.returncode == 0, registration.stderr
    commands = json.loads(registration.stdout)
    assert str(installed) in commands["PreToolUse"] and "recall_hook/session_start.py" in commands["SessionStart"]

    home = Path(env["ENGRAM_HOME"])
    (home / "recollections").mkdir(parents=True)
    (home / "recollections" / "s1.json").write_text(json.dumps(
        {"messageUuid": "u1", "timestamp": 1, "bites": [{"id": "ep_1", "bite": "Use uv, not pip", "date": "2026-11-23",
                                                          "importance": "high"}]}))
    event = json.dumps({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode()
    pre = run(["/bin/sh", "-c", commands["PreToolUse"]], cwd=tmp_path, env=env, stdin=event)
    assert pre.returncode == 0 and b"Use uv, not pip" in pre.stdout, pre.stderr

    conn = open_store(home / "engram.db")
    with write_transaction(conn):
        insert_episode(conn, NewEpisode(
            id="ep_pref", session_id=None, project=None, scope="global", summary="Always run ruff before committing",
            entities=[], importance="high", kind="convention", source_type="manual",
            full_content="Always run ruff before committing", source_uuids=[], content_hash="h1",
            created_at=int(time.time() * 1000)), None)
    conn.close()
    start_event = json.dumps({"session_id": "s2", "hook_event_name": "SessionStart", "source": "startup",
                              "cwd": str(tmp_path)}).encode()
    start = run(["/bin/sh", "-c", commands["SessionStart"]], cwd=tmp_path, env=env, stdin=start_event)
    assert start.returncode == 0 and b"Always run ruff before committing" in start.stdout, start.stderr


def test_engram_mcp_serves_its_tools_from_the_install(installed: Path, env: dict[str, str], tmp_path: Path) -> None:
    async def tools() -> set[str]:
        params = StdioServerParameters(command=str(installed / "bin" / "engram"), args=["mcp"], env=env,
                                       cwd=str(tmp_path))
        async with Client(params, read_timeout_seconds=120) as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert {"memory_recall", "memory_expand", "memory_remember", "memory_status"} <= anyio.run(tools)
