"""A command as a memory writes it (shape 11 of issue 35: text the agent reads in one glance): a console's cost
line pasted after a command the user copied from the terminal is left out, a leading `cd <folder> &&` too (unless
the `cd` is what failed), a git message, and a long command is cut with one mark."""

from __future__ import annotations

import pytest

from processor.memory.command_text import command_shown, command_told

# As BookMinder's sessions recorded them (the user pasted commands from Claude Code's console).
PASTED = ("cd /Users/palimondo/Developer/BookMinder && source .venv/bin/activate && pytest --spec)…"
          "                                                        Cost: $0.0230 (7.1s")
PASTED_LONG = ("cd /Users/palimondo/Developer/BookMinder && source .venv/bin/activate && pytest "
               "--cov=bookminder --cov-report=term-missing)…                    Cost: $0.0488 (5.1s")


@pytest.mark.parametrize(("target", "shown"), [
    (PASTED, "source .venv/bin/activate && pytest --spec"),
    (PASTED_LONG, "source .venv/bin/activate && pytest --cov=bookminder --cov-report=term-missing"),
    ("git commit -m \"Add the parser\n\nLong body\"", 'git commit -m "Add the parser…'),
])
def test_a_command_as_a_memory_shows_it(target: str, shown: str) -> None:
    assert command_shown(target, 200) == shown


def test_a_command_as_a_memory_tells_it() -> None:
    root = "/Users/palimondo/Developer/BookMinder"
    assert command_told(f'git add a.py && cd {root} && git commit -m "Fix the parser"', root=root) == \
        'git add a.py && git commit -m "…"'
    assert command_told("cd /tmp && uv venv", keep_cd=True) == "cd /tmp && uv venv"  # the `cd` is what failed
    assert command_told("x" * 300, 120) == "x" * 120 + "…"
    assert "Cost:" not in command_told(PASTED) and "…" not in command_told(PASTED)
