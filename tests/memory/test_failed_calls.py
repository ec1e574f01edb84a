"""How a failed call is known when a memory tells it (processor/memory/failed_calls.py): the error line that says
what went wrong, whatever printed it. Each case a row."""

from __future__ import annotations

import pytest

from processor.hook_kit.failure_keys import signature
from processor.memory.failed_calls import _error_line, of_the_moment

TRACEBACK = ('Error: Exit code 1\nTraceback (most recent call last):\n  File "/srv/app/main.py", line 9, in <module>\n'
             '    port = config["port"]\nKeyError: \'port\'')


@pytest.mark.parametrize(("error", "line"), [
    pytest.param(TRACEBACK, "KeyError: 'port'", id="a Python traceback: its exception line, not its first"),
    pytest.param("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    import yaml\n"
                 "ModuleNotFoundError: No module named 'yaml'", "ModuleNotFoundError: No module named 'yaml'",
                 id="an exception whose name holds the word 'Error'"),
    pytest.param("    Traceback (most recent call last):\n      File \"a.py\", line 1, in <module>\n"
                 "    ValueError: bad port", "ValueError: bad port", id="a traceback printed indented"),
    pytest.param("Exit code 128\nfatal: not a git repository", "fatal: not a git repository",
                 id="no traceback: the first line that names an error"),
])
def test_the_error_line_a_memory_tells(error: str, line: str) -> None:
    assert _error_line(error) == line


@pytest.mark.parametrize(("error", "moment"), [
    pytest.param("fatal: Unable to create '/Users/m/Code/cipher-box/.git/index.lock': File exists.\n\nAnother git "
                 "process seems to be running in this repository", True, id="a lock file another git left behind"),
    pytest.param("fatal: pathspec 'notes.txt' did not match any files", True, id="a path typed wrong"),
    pytest.param("ERROR: file or directory not found: test/test_combined_transcript_link.py", True,
                 id="pytest given a path from another folder (claude-code-log, after a cd)"),
    pytest.param("(eval):1: command not found: pytest", False, id="a tool not installed here: how things run"),
])
def test_a_failure_of_the_moment_is_known_by_its_signature(error: str, moment: bool) -> None:
    """cipher-box's index.lock refusal was told before three later commits: its signature (paths masked,
    punctuation dropped) must still read as a failure of the moment."""
    assert of_the_moment(signature(error)) is moment
