"""Which program a project runs for a job, read from its sessions' real commands."""

from __future__ import annotations

import pytest

from processor.memory.tool_roles import ROLES, others, programs_of, project_tools


@pytest.mark.parametrize(("command", "programs"), [
    ("npx eslint --fix tests/e2e/page-objects/file-browser/context-menu.page.ts 2>&1", {"eslint"}),
    ("pnpm --filter web exec biome check apps/web/src/routes/SettingsPage.tsx 2>&1", {"biome"}),
    ("cd apps/api && npx jest --testPathPattern=email-otp", {"jest"}),
    ("cd /Users/palimondo/Developer/BookMinder && source .venv/bin/activate && python -m pytest --cov=bookminder",
     {"pytest"}),
    ("uv run pytest test/test_combined_transcript_link.py -v", {"pytest"}),
    ("source .venv/bin/activate && ruff check . && ruff format --check .", {"ruff"}),
    ("grep -n eslint package.json", set()),  # names it, runs grep
    ("pnpm --filter web lint 2>&1 | tail -20", set()),  # the project's script: what it runs is not in the command
])
def test_the_job_programs_a_command_runs(command: str, programs: set[str]) -> None:
    assert programs_of(command) == programs


def test_the_project_runs_the_program_it_last_ran_for_a_job_and_no_other_of_its_language() -> None:
    calls = [("npx eslint --fix a.ts", 300), ("npx jest --testPathPattern=otp", 200), ("npx eslint .", 100),
             ("source .venv/bin/activate && pytest -q", 50)]
    used = project_tools(calls)
    assert [(ROLES[u.role][0], u.program, u.ts_ms) for u in used] == [
        ("lints", "eslint", 300), ("runs its tests", "jest", 200), ("runs its tests", "pytest", 50)]
    assert others(used[0], {"eslint", "jest", "pytest"}) == ["biome", "oxlint", "standard", "tslint", "xo"]
    assert "vitest" in others(used[1], {"eslint", "jest", "pytest"}) and "nose2" not in others(used[1], set())
