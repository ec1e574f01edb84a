"""Shared memory between two machines of one person: a memory made on A is recalled on B; forgets, versions."""

from __future__ import annotations

import pytest

from processor.memory.episodes import EpisodeStore
from processor.share import commands
from processor.share.sync import Sharing
from processor.store import open_store
from tests.share_fixtures import Machine, SharedSetup

PROJECT = "/work/example-app"


def store_of(machine: Machine) -> EpisodeStore:
    return EpisodeStore(machine.settings, open_store(machine.settings.db_path))


def sync(machine: Machine) -> None:
    sharing = Sharing(machine.settings)
    try:
        sharing.sync()
    finally:
        sharing.close_all()


@pytest.fixture
def two_machines(shared: SharedSetup) -> tuple[Machine, Machine]:
    shared.init()
    alice = shared.person("alice")
    return shared.machine("a", alice), shared.machine("b", alice)


def test_a_memory_made_on_a_is_recalled_on_b(two_machines: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, b = two_machines
    on_a = store_of(a)
    memory_id, _ = on_a.remember("The staging deploy needs AWS_REGION=eu-west-1 or the upload step silently "
                                 "writes to us-east-1.", kind="gotcha", project=PROJECT)
    on_b = store_of(b)
    assert not on_b.recall("which region does the staging deploy need", project=PROJECT)
    sync(a)
    sync(b)
    hits = on_b.recall("which region does the staging deploy need", project=PROJECT)
    assert hits and hits[0].id == memory_id
    assert "eu-west-1" in on_b.expand(memory_id).full_content
    # The server holds it once, owned by the person, made on machine A.
    rows = shared.admin_sql(f"SELECT owner, machine_id, seq FROM engram.memories WHERE id = '{memory_id}'")
    assert len(rows) == 1 and rows[0][0] == a.role
    # Syncing again changes nothing: no sequence moves, no second copy.
    sync(a)
    sync(b)
    assert shared.admin_sql(f"SELECT seq FROM engram.memories WHERE id = '{memory_id}'") == [(rows[0][2],)]
    assert on_b.conn.execute("SELECT count(*) FROM episodes WHERE id = ?", (memory_id,)).fetchone()[0] == 1


def test_status_reports_pending_and_sync(two_machines: tuple[Machine, Machine]) -> None:
    a, _ = two_machines
    Sharing(a.settings).close_all()  # configured: changes are queued from now on, server or not
    store_of(a).remember("Use ruff, never flake8, in this repository.", kind="convention", project=PROJECT)
    before = commands.status(a.settings)
    assert before.data["pending"] >= 1
    sync(a)
    after = commands.status(a.settings)
    assert after.data["pending"] == 0 and after.data["pushed"] >= 1 and after.data["server_waiting"] == 0
    assert after.data["last_error"] is None
