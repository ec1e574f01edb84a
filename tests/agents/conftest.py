"""What the install tests of every agent share: a registration with this interpreter and the hook scripts here."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.install.registration import Registration, hook_python

REPO = Path(__file__).resolve().parents[2]
PYTHON = hook_python()


@pytest.fixture
def registration() -> Registration:
    return Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=REPO / "recall_hook" / "pretooluse.py")
