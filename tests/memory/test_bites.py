"""Episodes that follow the work and query-focused bites: where long rounds are split, what a bite says,
that every place a memory reaches the agent uses the same bite, and that a rebuild keeps the ids people
acted on. Real SQLite, the real GGUF model, the real PreToolUse hook."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.tailer import Tailer
from processor.config import SettingsHolder
from processor.memory.bites import BITE_TOKENS, Passage, bite_for, bites_for
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import Episodizer
from processor.memory.sentences import units
from processor.memory.verbatim import TASK_HEADER_CHARS, TASK_PREFIX, round_pieces, split_task_header, task_header
from processor.recall.format import format_hits
from processor.recall.recollections import RecollectionWriter
from processor.store import episodes as sql
from processor.store.episodes import StoredMessage
from processor.tokens import estimate_tokens
from tests.hooks.test_pretooluse import LAUNCHER_ARGV, event, injected

SID = "b17e5000-0000-4000-8000-000000000001"
OTHER_SID = "b17e5000-0000-4000-8000-000000000002"
REQUEST = "Please make the CSV export handle commas inside quoted fields, then run the tests."


def msg(i: int, role: str, text: str, minute: float = 0.0) -> StoredMessage:
    return StoredMessage(i, f"u{i}", role, text, 1_700_000_000_000 + int(i * 1000 + minute * 60_000))


def agentic_round() -> list[StoredMessage]:
    """One prompt, then steps: a text, tool calls, the next text... with a code block, a list and a pause."""
    steps = [
        "I'll start by reading the exporter. The writer lives in export/csv_writer.py and builds rows by hand.",
        "[tool: Read /repo/export/csv_writer.py]",
        "[tool: Grep /repo/export]",
        "The bug is in join_row: it joins cells with a comma and never quotes them. "
        "Here is the fix I am applying:\n```python\ndef join_row(cells):\n"
        "    return ','.join(quote(c) for c in cells)\n\n\ndef quote(cell):\n    if ',' in cell or '\"' in cell:\n"
        "        return '\"' + cell.replace('\"', '\"\"') + '\"'\n    return cell\n```\n"
        "That keeps plain cells unchanged.",
        "[tool: Edit /repo/export/csv_writer.py]",
        "Now the tests. I added three cases:\n- a cell with a comma is quoted\n- a cell with a quote doubles it\n"
        "- a plain cell is left alone",
        "[tool: Edit /repo/tests/test_csv.py]",
        "[tool: Bash]",
        "All 42 tests pass. The importer in import/csv_reader.py already used the csv module, so it needed "
        "no change. " + "It reads quoted fields correctly since the csv module handles the dialect. " * 3,
        "[tool: Read /repo/import/csv_reader.py]",
    ]
    messages = [msg(1, "user", REQUEST)]
    for n, text in enumerate(steps, 2):
        messages.append(msg(n, "assistant", text, minute=15.0 if n >= 10 else 0.0))  # a pause before the last steps
    return messages


def sentences_of(text: str) -> list[str]:
    return [u.text for u in units(text, 10_000) if u.kind in ("sentence", "item")]


def test_a_continuation_piece_never_starts_or_ends_inside_a_sentence_or_code_block_and_carries_the_task_header(
) -> None:
    messages = agentic_round()
    pieces = round_pieces(messages, max_chars=420)
    assert len(pieces) >= 3
    header = task_header(REQUEST)
    assert header == REQUEST  # short enough to be the header whole
    every_sentence = [s for m in messages for s in sentences_of(m.text) if not s.startswith("[tool:")]
    for index, piece in enumerate(pieces):
        found_header, body = split_task_header(piece.full_content)
        assert len(body) <= 420  # the piece's own text; the header comes on top
        if index:
            assert piece.full_content.startswith(f"{TASK_PREFIX}{header}\n\n")
            assert found_header == header and piece.summary.startswith(f"(part {index + 1}) ")
        # Each code fence opened in a piece is closed in it: no piece starts or ends inside a code block.
        assert body.count("```") % 2 == 0, body
        # The piece opens with a speaker label and a whole sentence, list item, code block or tool note.
        assert re.match(r"(user|assistant): (\S)", body), body[:60]
    # Every sentence of the round is whole inside one piece: none was cut at a piece boundary.
    bodies = [" ".join(split_task_header(p.full_content)[1].split()) for p in pieces]
    for sentence in every_sentence:
        assert any(" ".join(sentence.split()) in b for b in bodies), sentence
    # Steps start at an assistant text that follows tool calls, and the 15-minute pause is a boundary.
    starts = [split_task_header(p.full_content)[1] for p in pieces[1:]]
    assert any(s.startswith("assistant: All 42 tests pass.") for s in starts), starts
    assert all(p.created_at >= messages[0].ts_ms for p in pieces)


def test_a_code_block_longer_than_a_piece_is_cut_into_complete_blocks() -> None:
    code = "```js\n" + "\n".join(f"const value{i} = compute({i});" for i in range(120)) + "\n```"
    pieces = round_pieces([msg(1, "user", "Write the table."), msg(2, "assistant", code)], max_chars=500)
    assert len(pieces) > 3
    lines_seen = []
    for piece in pieces:
        body = split_task_header(piece.full_content)[1]
        assert body.count("```") % 2 == 0, body
        lines_seen += [line for line in body.splitlines() if line.startswith("const value")]
    assert lines_seen == [f"const value{i} = compute({i});" for i in range(120)]  # every line, once, in order


@pytest.mark.parametrize("text", [
    "x" * 1_000_000,  # a megabyte blob with no spaces
    "word " * 200_000,  # a megabyte with no sentence boundaries
    "構成ファイルを更新しました。テストはすべて通りました！次はデプロイです。" * 200,  # no spaces, CJK punctuation
    "Die Datei wurde geändert. Приложение перезапущено. " * 500,
    "\x00\x01\x02 binary-looking \xff\xfe " * 5_000,
    "```\n" + "unclosed code block line\n" * 5_000,
])
def test_bad_input_is_split_and_bitten_within_bounds(text: str) -> None:
    pieces = round_pieces([msg(1, "user", "Look at this paste: " + text[:200]), msg(2, "assistant", text)], 500)
    assert pieces and all(len(split_task_header(p.full_content)[1]) <= 500 for p in pieces)
    assert all(len(split_task_header(p.full_content)[0]) <= TASK_HEADER_CHARS for p in pieces)
    assert len(pieces) <= 12  # a huge message contributes only its head
    for query in ("deploy tests", "テスト デプロイ", "Datei geändert", "binary block", None):
        for bite in bites_for(query, pieces):
            assert bite and estimate_tokens(bite) <= BITE_TOKENS


def test_the_bite_is_the_sentence_that_answers_the_query_within_45_tokens() -> None:
    content = (TASK_PREFIX + "Make the CSV export handle commas\n\nassistant: I read the exporter first. "
               "The bug was in join_row, which joined cells with a comma and never quoted them. "
               "I ran the linters and they were clean. The fix quotes any cell holding a comma or a quote. "
               "Finally I updated the changelog for the next release.")
    memory = Passage("Make the CSV export handle commas → I read the exporter first.", content)
    bite = bite_for("why were the CSV cells with commas broken in join_row?", memory)
    assert "The bug was in join_row, which joined cells with a comma and never quoted them." in bite
    assert "changelog" not in bite and estimate_tokens(bite) <= BITE_TOKENS
    assert bite_for("what does the fix quote?", memory).count("The fix quotes any cell holding a comma or a quote.")
    # The task header is said when there is room for it: what the answer is about.
    assert bite_for("changelog release", memory).startswith("Make the CSV export handle commas: ")
    # No query (the SessionStart digest), or nothing shared with it: the stored summary.
    assert bite_for(None, memory) == memory.summary
    assert bite_for("kubernetes ingress", memory) == memory.summary
    # One sentence longer than a bite: the stretch of it holding the query's words.
    long = Passage("s", "assistant: " + "filler words here " * 40 + "the retry budget is 7 attempts "
                   + "more filler text " * 40 + ".")
    cut = bite_for("retry budget attempts", long)
    assert "the retry budget is 7 attempts" in cut and estimate_tokens(cut) <= BITE_TOKENS


def test_a_sentence_that_ends_with_a_colon_brings_what_it_announces() -> None:
    content = ("assistant: I looked at the failing browser tests after the refactoring. "
               "The refactoring broke the browser tests because:\n"
               "- sidechain messages lost their CSS class in the template\n"
               "- the timeline read `text` where it should read `content`\n"
               "Let me fix the browser tests:\n[tool: Edit /w/app/render.py]")
    memory = Passage("browser tests", content)
    bite = bite_for("what broke the browser tests after the refactoring?", memory)
    assert "because: - sidechain messages lost their CSS class" in bite, bite
    # An announced action is followed by its tool call, not by an answer: the note is not pulled in.
    assert "[tool: Edit" not in bite_for("fix the browser tests", memory)


def capture_round(store: EpisodeStore, transcript: Path, session_id: str, replies: list[str],
                  request: str = REQUEST) -> None:
    lines = [user_line(request, session_id=session_id, uid=f"{session_id}-q", cwd="/work/shop")]
    lines += [assistant_line(text, session_id=session_id, uid=f"{session_id}-a{n}", message_id=f"m{n}",
                             cwd="/work/shop", timestamp=f"2026-11-01T10:{n:02d}:00.000Z")
              for n, text in enumerate(replies)]
    lines.append(user_line("thanks, next task", session_id=session_id, uid=f"{session_id}-next", cwd="/work/shop",
                           timestamp="2026-11-01T11:00:00.000Z"))
    with open(transcript, "a") as f:
        f.writelines(lines)
    Tailer(store.conn).tail(transcript)
    Episodizer(store).episodize(session_id)


def test_a_user_message_gets_statements_and_memory_recall_gets_the_answering_sentence(
        store: EpisodeStore, holder: SettingsHolder, tmp_path: Path) -> None:
    """Shown unasked: what a memory states (a rule, a lesson), never a verbatim round's narration; asked for
    (memory_recall, `engram recall`): the sentence of a round that answers, as before."""
    replies = [m.text for m in agentic_round()[1:]]
    capture_round(store, tmp_path / f"{OTHER_SID}.jsonl", OTHER_SID, replies)
    rule, _ = store.remember("The CSV importer must keep using the stdlib csv module for quoted fields; "
                             "never split lines by hand.", kind="convention", scope="global")
    query = "Why did the CSV importer need no change for quoted fields?"
    path = RecollectionWriter(holder).write(store, SID, "p1", query, project=None)
    file_bites = json.loads(path.read_text())["bites"]
    assert [b["id"] for b in file_bites] == [rule]
    assert file_bites[0]["bite"] == sql.get_episode(store.conn, rule).summary
    assert estimate_tokens(file_bites[0]["bite"]) <= BITE_TOKENS
    hits = store.recall(query, limit=3)
    top = next(h for h in hits if h.id != rule).bite
    assert "already used the csv module" in top, top  # the sentence that answers, not the piece's head
    assert f"{top} — ID: " in format_hits(hits)  # memory_recall's and `engram recall`'s text
    # The PreToolUse hook (the real process) injects the file's bite as it is.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_HOME": str(holder.current.home)}
    done = subprocess.run(LAUNCHER_ARGV, input=event(SID), capture_output=True, env=env, timeout=30)
    context = injected(done)
    assert f"{file_bites[0]['bite']} (id: {rule})" in context


def test_a_rebuild_keeps_the_ids_people_expanded_or_forgot(store: EpisodeStore, holder: SettingsHolder,
                                                           tmp_path: Path) -> None:
    secret_step = "The staging password rotation moved to vault path kv/shop/rotation. It runs every Sunday."
    replies = [m.text for m in agentic_round()[1:]]
    replies.insert(3, secret_step)
    # An older builder's pieces: small ones, as a store made before this builder would hold.
    holder.replace(dataclasses.replace(holder.current, values={**holder.current.values, "verbatim_max_chars": 200}))
    capture_round(store, tmp_path / f"{SID}.jsonl", SID, replies)
    before = sql.verbatim_episodes(store.conn, SID)
    assert len(before) >= 4
    # The piece where the work resumed after a pause: the new builder starts a piece there too.
    expanded = next(e for e in before if "All 42 tests pass" in e.full_content)
    store.expand(expanded.id)
    forgotten = next(e for e in before if "vault path" in e.full_content)
    store.forget(forgotten.id, reason="not to be kept")
    holder.replace(dataclasses.replace(holder.current, values={**holder.current.values, "verbatim_max_chars": 600}))

    assert store.reindex() > 0
    after = {e.id: e for e in sql.verbatim_episodes(store.conn, SID)}
    kept = after[expanded.id]
    assert kept.status == "active" and kept.access_count == 1
    assert kept.source_uuids[0] == expanded.source_uuids[0] and kept.full_content.startswith(TASK_PREFIX)
    assert after[forgotten.id].status == "forgotten" and after[forgotten.id].full_content == ""
    # The forgotten text never comes back in a rebuilt piece.
    assert not any("vault path" in e.full_content for e in after.values())
    untouched = {e.id for e in before} - {expanded.id, forgotten.id}
    assert untouched - set(after)  # pieces no one acted on were remade
    assert len(after) < len(before) + 2
    # The rebuilt store answers as a fresh one would, and a second rebuild changes nothing.
    assert store.recall("csv importer quoted fields", limit=3)
    again = {e.id: e.full_content for e in (store.reindex(), *sql.verbatim_episodes(store.conn, SID))[1:]}
    assert again == {i: e.full_content for i, e in after.items()}
