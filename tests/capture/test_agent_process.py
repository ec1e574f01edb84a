"""Whether an agent's CLI still runs in a folder, read from the real process table: a process started here under
the CLI's name (a script called `gemini`, as `node …/bin/gemini` runs), in a folder below the session's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from processor.capture.agent_process import runs_in, working_folders


def test_a_cli_running_in_a_folder_is_found_there_and_gone_once_it_exits(tmp_path: Path) -> None:
    cli = tmp_path / "bin" / "gemini"
    cli.parent.mkdir()
    cli.write_text("import time\ntime.sleep(120)\n")
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    (repo / "src").mkdir(parents=True)
    elsewhere.mkdir()
    proc = subprocess.Popen([sys.executable, str(cli)], cwd=repo / "src")
    try:
        deadline = time.monotonic() + 10
        while str((repo / "src").resolve()) not in (working_folders(["gemini"]) or []) and time.monotonic() < deadline:
            time.sleep(0.05)
        folders = working_folders(["gemini"])
        assert runs_in(folders, str(repo)) and runs_in(folders, str(repo / "src"))
        assert not runs_in(folders, str(elsewhere)) and not runs_in(folders, str(tmp_path / "rep"))
        assert not runs_in(working_folders(["qwen"]), str(repo))  # another CLI's name
    finally:
        proc.kill()
        proc.wait()
    assert not runs_in(working_folders(["gemini"]), str(repo))


def test_unknown_folders_never_say_a_process_is_gone() -> None:
    assert runs_in(None, "/anywhere")
