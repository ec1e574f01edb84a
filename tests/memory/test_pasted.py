"""Issue 9, point 3: what a user pastes (logs, diffs, pages) is an attachment of its message, not episodes."""

from __future__ import annotations

import re
from pathlib import Path

from processor.memory.episode_store import EpisodeStore
from processor.memory.pasted import LARGE_CHARS, condense, note
from processor.memory.sentences import units
from processor.memory.verbatim import round_pieces, task_header
from processor.store.episodes import StoredMessage
from tests.memory.test_recency import session

RULE = "=" * 29
PYTEST_LOG = f"<bash-stdout>{RULE} test session starts {RULE}\n" + "".join(
    f"test/test_cache.py::TestCacheManager::test_case_{n} PASSED [{n:3d}%]\n" for n in range(60)
) + ("FAILED test/test_cache.py::TestCacheVersion::test_major_bump - AssertionError: assert True is False\n"
     "=========== 1 failed, 60 passed in 3.30s ============\n</bash-stdout><bash-stderr></bash-stderr>")

DIFF = "\n".join([
    "diff --git a/claude_code_log/renderer.py b/claude_code_log/renderer.py",
    "index ecd1cfd..d6e3205 100644",
    "--- a/claude_code_log/renderer.py",
    "+++ b/claude_code_log/renderer.py",
    "@@ -38,24 +38,19 @@ from .cache import get_library_version",
    " def get_project_display_name(",
    "     project_dir_name: str, working_directories: Optional[List[str]] = None",
    " ) -> str:",
    "-        best_path = min(working_paths, key=lambda p: (len(p.parts), len(str(p))))",
    "-        return best_path.name",
    "+        # Take the most recent working directory from the list",
    "+        last_path = Path(working_directories[0])",
    "+        return last_path.name",
] * 2)


def test_a_pasted_test_run_becomes_one_note_with_its_verdict_and_failing_test() -> None:
    condensed = condense(PYTEST_LOG)
    assert condensed.count("[pasted bash-stdout") == 1
    assert "1 failed, 60 passed in 3.30s" in condensed  # the verdict: the log's last line
    assert "TestCacheVersion::test_major_bump" in condensed  # the failing test comes first among the names
    assert "test_case_17" not in condensed
    assert len(condensed) < 500


def test_the_users_words_stay_and_a_diff_after_them_becomes_a_note() -> None:
    ask = "Please have a look at this patch diff, I changed my mind: take the least nested path first."
    condensed = condense(f"{ask}\n\n{DIFF}")
    assert condensed.startswith(ask)
    assert "[pasted output" in condensed and "get_project_display_name" not in condensed.split("[pasted")[0]
    assert "working_directories" in condensed  # the diff's names stay findable


def test_a_pasted_page_keeps_its_opening_and_closing_paragraphs() -> None:
    middle = "\n\n".join(f"Paragraph {n} of the uv tool documentation explains tool environments." for n in range(80))
    ask, close = "We need a cleaner way to reinstall. Does this doc page help?", "So which command should we use?"
    text = f"{ask}\n\n{middle}\n\n{close}"
    assert len(text) > LARGE_CHARS
    condensed = condense(text)
    assert condensed.startswith("We need a cleaner way to reinstall.")
    assert condensed.endswith("So which command should we use?")
    assert "[pasted text" in condensed and len(condensed) < LARGE_CHARS


def test_prose_short_code_and_small_outputs_are_left_alone() -> None:
    for text in ("Why does the upload test fail on CI but not locally?",
                 "Run this:\n```bash\nuv tool install --force .\n```\nand tell me what it prints.",
                 "It says:\nE   AssertionError: 1 != 2\nFAILED test_x.py::test_y",
                 "Always run the linter before committing. " * 30):
        assert condense(text) == text


def test_a_round_with_a_paste_is_one_piece_whose_task_is_the_users_words() -> None:
    ask = "The cache tests fail after the version bump, can you fix them?"
    messages = [StoredMessage(1, "u1", "user", f"{ask}\n{PYTEST_LOG}", 1),
                StoredMessage(2, "a1", "assistant", "The major bump test expected an incompatible cache; by "
                                                    "default all versions are compatible, so I fixed the test.", 2)]
    pieces = round_pieces(messages, 500)
    assert len(pieces) <= 2  # the ask with the paste's note, then the reply (chunked, the log was ten pieces)
    assert all(p.full_content.startswith((f"user: {ask}", f"task: {ask}")) for p in pieces)
    assert pieces[0].summary.startswith(ask)
    assert task_header(condense(f"{ask}\n{PYTEST_LOG}")) == ask


def test_the_note_is_one_unit_of_its_own_kind() -> None:
    found = units(condense(f"Look at this:\n{PYTEST_LOG}"), 490)
    assert [u.kind for u in found] == ["sentence", "paste"]


def test_bad_input_comes_out_bounded() -> None:
    blob = "x" * 1_000_000  # no spaces, no lines
    assert len(condense(blob)) < LARGE_CHARS + 1_000
    binary = "".join(chr(c) for c in range(1, 0xD7FF, 7)) * 3
    assert len(condense(binary)) < LARGE_CHARS + 1_000
    chinese = "测试通过了。" * 2_000
    assert "[pasted text" in condense(chinese)
    assert note("", "output").startswith("[pasted output, 1 lines, 0 characters")


def test_a_paste_never_outranks_the_decision_about_it(store: EpisodeStore, tmp_path: Path) -> None:
    session(store, tmp_path, "s-paste", "2026-03-01",
            (f"Here is the cache test run:\n{PYTEST_LOG}", "I'll look at it."))
    session(store, tmp_path, "s-decision", "2026-03-01",
            ("What do we do about cache versions?",
             "We decided that every cache version is compatible unless listed as breaking; the test "
             "test_major_bump in test_cache.py now expects a compatible cache."))
    assert store.status()["episodes"] == 2  # the paste did not become pieces of its own
    hits = store.recall("cache test test_major_bump TestCacheVersion", limit=2)
    assert "decided" in hits[0].bite
    paste = store.expand(hits[1].id).full_content
    whole = re.search(r"whole: (msg_[\w-]+)\]", paste)
    assert whole and "test_case_17" not in paste
    assert "test_case_17" in store.expand(whole.group(1)).full_content  # the whole paste, kept with its message
