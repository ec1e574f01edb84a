"""A fix learned anywhere is told at the same failure everywhere (issue 32).

A real PostgreSQL, three Engram homes — two machines of one person (A, B) and a teammate's (C), the project shared
with their team — and three real git clones of one repository whose remotes are spelled three ways. Real
sessions, written as Claude Code and the Codex CLI write them, are processed by the real processor on A; one sync
later the real hooks, run as subprocesses at the same failure on B and on C, tell what A would tell, and are silent
exactly where A is silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from processor.hook_kit.project import index_name
from processor.share.machine import hostname
from processor.status import collect_status, format_status
from tests.support.share_fixtures import SharedSetup, capture, sync
from tests.support.share_homes import (
    Home,
    claude_fix,
    codex_fix,
    fixes_of,
    share_state,
    sid,
    team_homes,
    what_is_told,
)
from tests.support.viewer_fixtures import ViewerServer


@pytest.fixture
def three_homes(shared: SharedSetup, tmp_path: Path) -> tuple[Home, Home, Home]:
    return team_homes(shared, tmp_path)


def test_a_fix_learned_on_a_is_told_at_the_same_failure_on_b_and_c_and_silent_where_a_is(
        three_homes: tuple[Home, Home, Home]) -> None:
    a, b, c = three_homes
    claude_fix(a, sid("a1"), "2026-11-20T09:00:00")
    claude_fix(a, sid("a2"), "2026-11-20T11:00:00")  # the same failure in another session: it recurs
    codex_fix(a, sid("a3"), "2026-11-20T10:00:00")
    capture(a.machine)
    fixes = fixes_of(a)
    assert len(fixes) == 2, fixes  # one memory per way of failing, however many sessions met it
    ids = set(fixes)
    [pytest_fix] = [i for i, summary in fixes.items() if "pip install -e ." in summary]
    [ruff_fix] = [i for i, summary in fixes.items() if "[dev]" in summary]
    on_a = what_is_told(a, "ha", ids)
    assert on_a == {
        "right after pytest failed": {pytest_fix},
        "right after ruff was not found (Codex)": {ruff_fix},
        "before pytest (met in two sessions)": {pytest_fix},
        "before a call that applies the fix": set(),
        "before ruff (met once)": set(),
        "at a prompt about it": set(),
        # A fix waits for its call or its failure: the digest holds rules and where the last session stopped.
        "at session start": set(),
    }
    sync(a.machine)  # one sync: A pushes, B and C pull
    sync(b.machine)
    sync(c.machine)
    assert set(fixes_of(b)) == ids and set(fixes_of(c)) == ids
    # Filed by the pull in each machine's own clone of the project, under the keys its own miner uses.
    for where in (b, c):
        header, keys = (where.machine.home / "recollections" / "lessons" / index_name(where.repo)).read_text() \
            .splitlines()[:2]
        assert json.loads(header)["root"] == where.repo
        assert '"fail:pytest"' in keys and '"fail:ruff"' in keys and a.repo not in keys
    assert what_is_told(b, "hb", ids) == on_a
    assert what_is_told(c, "hc", ids) == on_a
    # Where each fix came from, as `engram status` and the viewer say it — and nothing a teammate keeps to himself.
    machine_a = share_state(a).machine_id
    for where, source in ((b, f"learned on {hostname()}"), (c, f"from teammate {a.machine.role}")):
        text = format_status(collect_status(where.settings))
        assert f"error fixes from elsewhere, told here at the same failure: {source}: 2 (newest 2026-11-20)" in text
        assert a.repo not in text and sid("a1") not in text and (where is b or machine_a not in text)
    server = ViewerServer(c.settings)
    try:
        status, _, body = server.request("GET", f"/ui/project?p={quote(c.repo)}", cookie=server.login())
    finally:
        server.stop()
    page = body.decode()
    assert status == 200 and page.count(f"from teammate {a.machine.role}, 2026-11-20") == 2
    assert machine_a not in page and sid("a1") not in page

