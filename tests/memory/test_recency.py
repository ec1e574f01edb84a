"""Time that means something, no rich-get-richer, and preferences without an LLM (issue 9, points 5–7).

On a real database with the real GGUF model: a newer episode that states a change about the same subject
supersedes the older one (never a bite or in the digest, shown "superseded by …" on recall and never
above its successor); recency counts from the project's newest activity; recalls never change the
ranking and uses count bounded and decaying; a standing preference in the user's words becomes a
high-importance memory that reaches the SessionStart digest, and look-alikes stay ordinary.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.tailer import Tailer
from processor.config import SettingsHolder
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import Episodizer
from processor.memory.preferences import standing_statements
from processor.memory.search import ProjectClock, SearchWeights, _frequency
from processor.memory.supersede import stated_change, subjects
from processor.recall import digest
from processor.recall.format import format_hits
from processor.recall.recollections import RecollectionWriter
from processor.store import cold as cold_sql
from processor.store import episodes as sql

PROJECT = "/work/recorder"
DAY = 86_400_000


def session(store: EpisodeStore, folder: Path, sid: str, day: str, *turns: tuple[str, str],
            cwd: str = PROJECT) -> list[str]:
    """Capture one session of (user, assistant) turns on `day` and build its episodes; returns their ids."""
    path = folder / f"{sid}.jsonl"
    with open(path, "a") as f:
        for i, (question, answer) in enumerate(turns):
            f.write(user_line(question, session_id=sid, cwd=cwd, timestamp=f"{day}T10:{i:02d}:00.000Z"))
            f.write(assistant_line(answer, session_id=sid, cwd=cwd, message_id=f"m{i}",
                                   timestamp=f"{day}T10:{i:02d}:30.000Z"))
    Tailer(store.conn).tail(path)
    Episodizer(store).episodize(sid, final=True)
    return [row[0] for row in store.conn.execute(
        "SELECT id FROM episodes WHERE session_id = ? ORDER BY created_at, rowid", (sid,))]


def episode(store: EpisodeStore, episode_id: str) -> sql.Episode:
    found = sql.get_episode(store.conn, episode_id)
    assert found is not None
    return found


OLD_DEV_SERVER = ("How do I run the dev server for the recorder?",
                  "The dev server is Rack: `rackup config.ru` serves the static files of the recorder on port "
                  "9292, and config.ru maps / to index.html.")
NEW_DEV_SERVER = ("Move the recorder's dev server off Rack.",
                  "Done: `config.ru` was replaced by Vite; the recorder's dev server is now `npm run dev` "
                  "(vite.config.js, port 5173), and `rackup config.ru` is no longer used.")


# --- 5. time that means something -------------------------------------------------------------------


def test_a_superseded_decision_is_never_injected_and_never_outranks_its_successor(
        store: EpisodeStore, holder: SettingsHolder, tmp_path: Path) -> None:
    [old] = session(store, tmp_path, "s-old", "2026-03-01", OLD_DEV_SERVER)
    [new] = session(store, tmp_path, "s-new", "2026-03-05", NEW_DEV_SERVER)
    before, after = episode(store, old), episode(store, new)
    assert before.status == "superseded" and before.superseded_by == new
    assert before.valid_to == after.created_at  # valid until the newer one was said
    assert after.status == "active"
    [action] = [a for a in cold_sql.actions(store.conn, "recency")]
    assert action[3] == old and "replaced by Vite" in action[5]

    # Used far more than its successor: still ranked below it.
    for _ in range(50):
        store.expand(old)
    query = "how do I start the recorder's dev server with rackup config.ru on port 9292"
    hits = store.recall(query, project=PROJECT)
    ids = [h.id for h in hits]
    assert new in ids and old in ids and ids.index(new) < ids.index(old)
    old_hit = hits[ids.index(old)]
    assert old_hit.note == f"superseded by {new} on 2026-03-05"
    assert f"superseded by {new}" in format_hits(hits)

    # Never a bite: not in the PreToolUse recollection, not in the SessionStart digest.
    path = RecollectionWriter(holder).write(store, "s-later", "u1", query, project=PROJECT)
    assert path is not None
    assert old not in path.read_text()
    found = digest.collect(store.conn, tmp_path / "queue", PROJECT, after.created_at + 3_600_000)
    shown = [m.id for section in (found.global_high, found.project_rules) for m in section]
    assert old not in shown


def test_a_successor_joins_the_results_of_a_query_that_finds_only_the_old_memory(
        store: EpisodeStore, tmp_path: Path) -> None:
    [old] = session(store, tmp_path, "s-old", "2026-03-01", OLD_DEV_SERVER)
    [new] = session(store, tmp_path, "s-new", "2026-03-05", NEW_DEV_SERVER)
    hits = store.recall("rackup maps / to index.html on port 9292", project=PROJECT, limit=2)
    ids = [h.id for h in hits]
    assert ids.index(new) < ids.index(old)


def test_change_wording_without_the_same_subject_or_as_a_question_supersedes_nothing(
        store: EpisodeStore, tmp_path: Path) -> None:
    [old] = session(store, tmp_path, "s-old", "2026-03-01", OLD_DEV_SERVER)
    session(store, tmp_path, "s-2", "2026-03-02", (
        "Should the recorder's dev server use Vite?",
        "Should we serve the recorder with Vite instead of `rackup config.ru` on port 9292?"))
    session(store, tmp_path, "s-3", "2026-03-03", (
        "The recorder's dev server shows a blank page on port 9292",
        "The problem is that `rackup config.ru` serves index.html instead of the recorder's static files."))
    session(store, tmp_path, "s-4", "2026-03-04", (
        "How do I run the dev server for the recorder?",
        "The recorder's dev server runs on port 9292; the tests now use pytest instead of nose."))
    assert episode(store, old).status == "active"
    # The rules themselves, without the vectors:
    older = subjects("Run `rackup config.ru` on port 9292.")
    assert stated_change("We switched to Vite, so config.ru is no longer used.", older)
    assert stated_change("Let me try Vite instead of config.ru.", older) is None
    assert stated_change("If config.ru is no longer used, delete it.", older) is None
    assert stated_change("Is config.ru replaced by Vite now?", older) is None
    assert stated_change("The linter no longer complains.", older) is None  # no shared subject
    # A rename makes a name stale, not what was said (the inquisitor rewrites names from git).
    assert stated_change("- Add index.html (renamed from config.ru) with the recorder", older) is None


def test_a_change_to_what_the_older_memory_proposed_fulfils_it_and_does_not_outdate_it() -> None:
    proposal = "You can set group.visible using the vis library. Using the built-in `visible` property is cleaner."
    older = subjects(proposal)
    done = "The `applyFilters()` function now uses the vis-timeline library's built-in `visible` property."
    assert stated_change(done, older, proposal) is None
    # The same cue with the older memory's subject before it is a change of that subject.
    assert stated_change("The `visible` property is no longer used; `applyFilters()` hides items.", older, proposal)


def test_recency_counts_from_the_projects_newest_activity_not_the_wall_clock(
        store: EpisodeStore, tmp_path: Path) -> None:
    text = ("Which port does the billing export listen on?", "The billing export listens on port 8125.")
    [older] = session(store, tmp_path, "s-a", "2024-01-01", text, cwd="/work/billing")
    [newer] = session(store, tmp_path, "s-b", "2024-01-31", text, cwd="/work/billing")
    weights = store.weights
    scored = {s.episode.id: s for s in store.search("billing export port", project="/work/billing")}
    # Almost three years old by the wall clock, yet the project's newest work has full recency, and the one
    # before it is one active day older (not thirty calendar days): an old project's history is not all ≈ 0.
    # Recency counts in proportion to relevance (both hold the same text: the same relevance).
    relevance = scored[newer].relevance
    assert scored[older].relevance == pytest.approx(relevance, abs=1e-3)
    assert scored[newer].score == pytest.approx((weights.relevance + weights.recency) * relevance, abs=1e-3)
    gap = scored[newer].score - scored[older].score
    assert gap == pytest.approx(weights.recency * relevance * (1 - 0.5 ** (1 / weights.recency_half_life_days)),
                                abs=1e-3)
    assert scored[newer].score > scored[older].score


def test_recency_never_lifts_a_recent_memory_that_barely_matches_over_an_older_one_that_answers(
        store: EpisodeStore, tmp_path: Path) -> None:
    [answer] = session(store, tmp_path, "s-old", "2024-01-01",
                       ("Which port does the billing export listen on?", "The billing export listens on port 8125."),
                       cwd="/work/billing")
    # Three months of newer work in the same project; the last days' memories share words with the question.
    for day in range(90):
        date = (datetime(2024, 1, 2) + timedelta(days=day)).strftime("%Y-%m-%d")
        turn = (("Where does the billing export write its files?",
                 f"The billing export writes its CSV files to /srv/exports ({day}).") if day >= 87 else
                (f"Tidy the invoice PDF layout, part {day}", "Moved the invoice footer and fixed the PDF margins."))
        session(store, tmp_path, f"s-{day}", date, turn, cwd="/work/billing")
    assert store.search("Which port does the billing export listen on?", project="/work/billing",
                        limit=1)[0].episode.id == answer


def test_age_counts_the_projects_active_days_not_the_calendar(store: EpisodeStore, tmp_path: Path) -> None:
    text = ("Which port does the billing export listen on?", "The billing export listens on port 8125.")
    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-06-01"]
    made = [session(store, tmp_path, f"s-{i}", day, text, cwd="/work/billing")[0] for i, day in enumerate(days)]
    clock = ProjectClock(store.conn, 1_900_000_000_000)
    ages = [clock.age_days("/work/billing", episode(store, i).created_at) for i in made]
    assert ages == [3.0, 2.0, 1.0, 0.0]  # five months of silence count as nothing
    assert clock.now("/work/billing") < 1_800_000_000_000  # uses fade from the project's own newest day


# --- 6. no rich-get-richer ----------------------------------------------------------------------------


MEMORIES = [
    "The staging database is PostgreSQL 16 behind pgbouncer on port 6543",
    "Staging deploys run from the release workflow; the database migrations run first",
    "The database backups of staging are kept for 14 days in the eu-west bucket",
    "The marketing site uses Tailwind CSS and the brand colour is orange",
    "Sourdough bread needs a 12 hour cold retard in the fridge before baking",
]


def test_a_hundred_identical_recalls_do_not_change_the_ranking(store: EpisodeStore) -> None:
    for text in MEMORIES:
        store.remember(text, kind="fact", scope="global")
    query = "how do I reach the staging database"
    first = [(h.id, h.score) for h in store.recall(query, limit=5)]
    for _ in range(100):
        assert [(h.id, h.score) for h in store.recall(query, limit=5)] == first
    counts = [row[0] for row in store.conn.execute("SELECT access_count FROM episodes")]
    assert counts == [0] * len(MEMORIES)


def test_the_use_signal_is_bounded_and_decays() -> None:
    weights, now = SearchWeights(), 1_800_000_000_000
    assert _frequency(0, now, now, weights) == 0.0
    assert 0 < _frequency(1, now, now, weights) < _frequency(10, now, now, weights) < 1.0
    assert _frequency(10**9, now, now, weights) < 1.0  # no count of uses outweighs relevance unboundedly
    half_life = weights.recency_half_life_days
    assert _frequency(10, now - int(half_life * DAY), now, weights) == pytest.approx(_frequency(5, now, now, weights))
    assert _frequency(1000, now - 3650 * DAY, now, weights) < 0.01  # an old burst of use fades out


def test_uses_cannot_lift_an_unrelated_memory_over_the_relevant_one(store: EpisodeStore) -> None:
    ids = [store.remember(text, kind="fact", scope="global")[0] for text in MEMORIES]
    for _ in range(200):
        store.expand(ids[4])  # the sourdough memory, used a lot
    assert store.recall("how do I reach the staging database", limit=5)[0].id == ids[0]


# --- 7. preferences without an LLM ------------------------------------------------------------------


def test_a_stated_preference_becomes_a_high_importance_memory_in_the_digest(
        store: EpisodeStore, tmp_path: Path) -> None:
    session(store, tmp_path, "s-pref", "2026-03-01",
            ("Fix the flaky upload test. From now on, always run the linter before you commit anything.",
             "Fixed the race in the upload test and ran the linter; all green."),
            ("I prefer small commits with one change each.", "Noted."),
            ("Never edit `js/lib/recorder.js` by hand: it is generated.", "Understood."))
    rows = store.conn.execute("SELECT id, kind, importance, scope, project, full_content, source_uuids FROM episodes "
                              "WHERE source_type = 'auto' ORDER BY created_at").fetchall()
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("convention", "high", "global"), ("preference", "high", "global"), ("convention", "high", "project")]
    assert rows[0][5] == "From now on, always run the linter before you commit anything."
    assert rows[2][4] == PROJECT
    found = digest.collect(store.conn, tmp_path / "queue", PROJECT, 1_800_000_000_000)
    assert {m.id for m in found.global_high} >= {rows[0][0], rows[1][0]}
    assert rows[2][0] in {m.id for m in found.project_rules}
    text = digest.render(found, 1500, tmp_path / "queue")
    assert "always run the linter before you commit" in text
    # It ranks for an analogous task in another project.
    hits = store.recall("commit these changes to git", project="/work/other", limit=3)
    assert rows[0][0] in [h.id for h in hits[:3]]
    # Said again word for word: not a second memory.
    session(store, tmp_path, "s-pref2", "2026-03-02",
            ("From now on, always run the linter before you commit anything.", "Will do."))
    assert store.conn.execute("SELECT count(*) FROM episodes WHERE source_type = 'auto'").fetchone()[0] == 3


FALSE_POSITIVES = [
    "Don't worry about the lint warnings, just fix the failing upload test.",
    "Why do you always run the whole suite?",
    "Can you make sure the recorder never crashes on an empty file?",
    "The export always fails when the cache is cold, can you look.",
    "Never mind, that works now.",
    "```\n# always use tabs\nnever commit generated files\n```\nWhat does this config do",
    "> Always run the tests first\nThis is from the README, is it still true",
    'The docs say "never commit secrets to git", is that enforced anywhere',
    "<bash-stdout>WARNING: never call init() twice</bash-stdout> what is this warning",
    "FAILED tests/test_upload.py::test_never_twice - AssertionError\nE   assert always_true() is False\nfix it",
    "Bitte benutze immer Tabs. 常にタブを使ってください。 Всегда используй табы.",
    "don't use mocks in this test",
    "Intro.\n\n" + "By default the tool always caches things, you should always clear it. " * 40 + "\n\nThanks.",
]


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_look_alikes_are_not_standing_preferences(text: str) -> None:
    assert standing_statements(text, PROJECT) == []


def test_look_alikes_stay_ordinary_rounds(store: EpisodeStore, tmp_path: Path) -> None:
    session(store, tmp_path, "s-probe", "2026-03-01", *[(text, "ok") for text in FALSE_POSITIVES],
            ("x" * 300_000 + " always \x00\ud7ff use tabs", "ok"))
    kinds = {row[0] for row in store.conn.execute("SELECT kind FROM episodes")}
    assert kinds == {"other"}


def test_secrets_in_a_preference_are_redacted(store: EpisodeStore, tmp_path: Path) -> None:
    session(store, tmp_path, "s-secret", "2026-03-01",
            ("From now on always deploy with the token ghp_abcdefghijklmnopqrstuvwxyz0123456789 set", "ok"))
    [content] = [row[0] for row in store.conn.execute(
        "SELECT full_content FROM episodes WHERE kind = 'convention'")]
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in content and "REDACTED" in content


def test_forgetting_the_successor_reinstates_the_memory_it_had_superseded(
        store: EpisodeStore, tmp_path: Path) -> None:
    [old] = session(store, tmp_path, "s-old", "2026-03-01", OLD_DEV_SERVER)
    [new] = session(store, tmp_path, "s-new", "2026-03-05", NEW_DEV_SERVER)
    assert episode(store, old).status == "superseded"
    assert [e.id for e in store.forget(new, "wrong")] == [new]  # another memory, not a version of it
    back = episode(store, old)
    assert back.status == "active" and back.superseded_by is None and back.valid_to is None
    assert "rackup config.ru" in back.full_content


def test_a_change_away_from_what_the_older_never_said_supersedes_nothing() -> None:
    older_text = "Switched the build backend in `pyproject.toml` to Hatchling."
    older = subjects(older_text)
    # Names the same file, but replaces a value the older memory never stated.
    assert stated_change("Changed from 3.6+ to 3.10+ to match `pyproject.toml`.", older, older_text) is None
    assert stated_change("Changed from setuptools to Hatchling in `pyproject.toml`.", older,
                         "We build `pyproject.toml` with setuptools.")
    # "You can now use X" offers something; it does not say that X replaced anything.
    assert stated_change("You can now use `act` to test `ci.yml` locally.", subjects("Run `ci.yml` on main.")) is None
    # "X is deprecated" describes X; it is not a change the project made.
    assert stated_change("Note: `ScriptProcessor` is still used (deprecated but functional).",
                         subjects("The recorder uses `ScriptProcessor`.")) is None


def test_later_steps_of_one_round_do_not_supersede_its_earlier_steps(store: EpisodeStore, tmp_path: Path) -> None:
    first = ("The recorder's dev server runs with `rackup config.ru` on port 9292; I read config.ru and "
             "index.html to see how the static files are served. " * 4)
    later = ("Done: `config.ru` was replaced by Vite; the recorder's dev server is now `npm run dev` and "
             "`rackup config.ru` is no longer used. " * 4)
    ids = session(store, tmp_path, "s-round", "2026-03-01", ("Move the recorder's dev server off Rack.", first))
    path = tmp_path / "s-round.jsonl"
    with open(path, "a") as f:  # the same round goes on: more assistant steps, ten minutes later
        f.write(assistant_line(later, session_id="s-round", cwd=PROJECT, message_id="m9",
                               timestamp="2026-03-01T10:20:00.000Z"))
        f.write(user_line("thanks", session_id="s-round", cwd=PROJECT, timestamp="2026-03-01T10:30:00.000Z"))
    Tailer(store.conn).tail(path)
    Episodizer(store).episodize("s-round", final=True)
    pieces = [row[0] for row in store.conn.execute(
        "SELECT id FROM episodes WHERE session_id = 's-round' ORDER BY created_at, rowid")]
    assert len(pieces) > len(ids) and all(episode(store, i).status == "active" for i in pieces)
