"""memory_recall with scope "team": the team's memories searched on the server (HNSW + full text, the local fusion),
for teams too large to replicate; never another person's private memory; memory_expand reads such a hit there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from mcp_tools.server import build_server
from processor.memory.episode_store import EpisodeStore
from processor.share import commands
from processor.share.sync import Sharing
from processor.store import open_store
from tests.conftest import REPO
from tests.support.share_fixtures import SharedSetup

MEMORIES = [
    ("The payments webhook is retried 3 times by the provider; after that the event is dropped for good.", "gotcha"),
    ("We decided to keep invoices in integer cents everywhere; never floats.", "decision"),
    ("Deploys to production only happen from the release branch through the pipeline.", "convention"),
    ("Fixed the flaky login test by freezing the clock with freezegun.", "bugfix"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def repo(path: Path, remote: str) -> str:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
    return str(path)


@pytest.mark.anyio
async def test_team_scope_searches_the_server_and_keeps_private_memories_private(shared: SharedSetup,
                                                                                tmp_path: Path) -> None:
    shared.init()
    alice, bob, carol = shared.person("alice"), shared.person("bob"), shared.person("carol")
    shared.team("backend", alice, bob)
    a = shared.machine("a", alice)
    # Bob's team is too large to replicate: his machine pulls only his own memories.
    b = shared.machine("b", bob, extra="share_team_replicate = false\n")
    c = shared.machine("c", carol)
    alice_repo = repo(tmp_path / "alice" / "shop", "git@github.com:acme/shop.git")
    bob_repo = repo(tmp_path / "bob" / "shop", "https://github.com/acme/shop")
    on_a = EpisodeStore(a.settings, open_store(a.settings.db_path))
    ids = [on_a.remember(text, kind=kind, project=alice_repo)[0] for text, kind in MEMORIES]
    private, _ = on_a.remember("My payments webhook password hint is the name of my cat.", kind="fact",
                               scope="global")
    commands.share_project(a.settings, alice_repo, "backend")
    sharing = Sharing(b.settings)
    try:
        sharing.sync()
    finally:
        sharing.close_all()
    local_b = EpisodeStore(b.settings, open_store(b.settings.db_path))
    assert not [h for h in local_b.recall("how often is the payments webhook retried", project=bob_repo)
                if h.id in ids]
    async with Client(build_server(b.settings, cwd=bob_repo)) as client:
        answer = await client.call_tool("memory_recall", {"query": "how often is the payments webhook retried",
                                                          "scope": "team"})
        text = answer.content[0].text
        hits = answer.structured_content["hits"]
        assert hits[0]["id"] == ids[0] and hits[0]["source"] == "team"
        assert f"made by {alice}" in text and "team backend" in text
        assert private not in {h["id"] for h in hits}
        expanded = await client.call_tool("memory_expand", {"id": ids[0]})
        assert "retried 3 times" in expanded.content[0].text and f"teammate {alice}" in expanded.content[0].text
        other = await client.call_tool("memory_recall", {"query": "money amounts invoices cents", "scope": "team"})
        assert other.structured_content["hits"][0]["id"] == ids[1]
    # The CLI's recall --scope team is the same search; Carol, in no team, finds nothing of it.
    from processor.share.team_search import search_team

    found = search_team(c.settings, EpisodeStore(c.settings, open_store(c.settings.db_path)).embedder,
                        "payments webhook retries", limit=5, project=None)
    assert found == []
    cli = subprocess.run([sys.executable, "-m", "processor.cli", "recall", "payments webhook retried", "--scope",
                          "team", "--json"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, **b.env()}, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)[0]["id"] == ids[0]


def test_team_scope_with_the_server_unreachable_names_the_fix(shared: SharedSetup) -> None:
    from bench.testbed.pg_cluster import free_port
    from processor.share.errors import ShareError
    from processor.share.team_search import search_team

    home = shared.tmp / "home-away"
    home.mkdir()
    (home / "config.toml").write_text(f'shared_database_url = "postgresql://alice@127.0.0.1:{free_port()}/db"\n'
                                      "share_connect_timeout_seconds = 1\n")
    from processor.config import load_settings

    settings = load_settings(env={**os.environ, "ENGRAM_HOME": str(home)})
    store = EpisodeStore(settings, open_store(settings.db_path))
    with pytest.raises(ShareError) as raised:
        search_team(settings, store.embedder, "anything at all", limit=3, project=None)
    assert "nothing answers" in raised.value.problem and raised.value.fix
