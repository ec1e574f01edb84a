"""The processor's stderr log lines, also while a library silences fd 2 for a moment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

# Logs one line while llama-cpp-python's quiet load (the one the embedder's model load uses) has fd 2 on /dev/null.
CHILD = textwrap.dedent("""
    import logging
    from llama_cpp._utils import suppress_stdout_stderr
    from processor.config import load_settings
    from processor.service.logs import setup_logging

    setup_logging(load_settings())
    logging.getLogger("engram.test").warning("before the quiet load")
    with suppress_stdout_stderr(disable=False):
        logging.getLogger("engram.test").warning("during the quiet load")
    logging.getLogger("engram.test").warning("after the quiet load")
""")


def test_a_line_logged_while_llama_cpp_silences_stderr_still_reaches_stderr_and_the_file(tmp_path: Path) -> None:
    env = {**os.environ, "ENGRAM_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    lines = [line.split("engram.test: ", 1)[1] for line in done.stderr.splitlines() if "engram.test: " in line]
    assert lines == ["before the quiet load", "during the quiet load", "after the quiet load"], done.stderr
    assert (tmp_path / "home" / "logs" / "engram.log").read_text().count("the quiet load") == 3
