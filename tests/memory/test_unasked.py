"""The bar a memory must clear to be shown with a user message (processor/memory/unasked.py): a template
prompt typed again, narration and tool lists never clear it; a rule that answers the prompt does. Real
transcripts through the real processor pass, the real embedding model, the real recollection writer."""

from __future__ import annotations

import json
from pathlib import Path

from bench.testbed.transcripts import Conversation
from processor.config import load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.statements import is_narration, is_tool_list, states_something
from processor.memory.unasked import bite_of
from processor.recall.recollections import RecollectionWriter
from processor.service.run_loop import Processor
from processor.store import open_store

CWD = "/work/shop"
SESSIONS = [f"22222222-0000-4000-8000-00000000000{n}" for n in range(1, 6)]
TEMPLATE = "Work on bead shop-{n}. Run `bd show shop-{n}` and implement it. Always run `bd close` when done."


def processed(projects: Path, conversations: list[Conversation]) -> EpisodeStore:
    folder = projects / "-work-shop"
    folder.mkdir(parents=True, exist_ok=True)
    for c in conversations:
        (folder / f"{c.session_id}.jsonl").write_text(c.text(), encoding="utf-8")
    settings = load_settings()
    Processor(settings).run_once(None)
    return EpisodeStore(settings, open_store(settings.db_path))


def bites(store: EpisodeStore, session_id: str, prompt: str) -> list[dict]:
    path = RecollectionWriter(load_settings()).write(store, session_id, f"{session_id}-prompt", prompt, project=CWD)
    return json.loads(Path(path).read_text())["bites"] if path else []


def template_session(n: int) -> Conversation:
    c = Conversation(SESSIONS[n], cwd=CWD, start=f"2026-11-0{n + 1}T10:00:00")
    c.user(TEMPLATE.format(n=n + 10))
    c.say("Now let me look at the bead.")
    c.bash(f"bd show shop-{n + 10}", f"shop-{n + 10}: fix the cart total")
    c.say("I'll run the tests to make sure everything works.")
    c.bash("npm test", "All 27 tests pass")
    c.say("All 27 tests pass. Let me close the bead.")
    c.bash(f"bd close shop-{n + 10}", "closed")
    c.say("Done!", end_turn=True)
    return c


def test_a_template_prompt_typed_again_is_never_a_bite(engram_home: Path, projects_dir: Path) -> None:
    store = processed(projects_dir, [template_session(n) for n in range(4)])
    # The template's rule became a memory of its own; typed again in the prompt, it is not news.
    assert store.conn.execute("SELECT count(*) FROM episodes WHERE kind = 'convention'").fetchone()[0] == 1
    assert bites(store, SESSIONS[4], TEMPLATE.format(n=99)) == []


def test_narration_and_tool_lists_are_never_bites(engram_home: Path, projects_dir: Path) -> None:
    store = processed(projects_dir, [template_session(n) for n in range(2)])
    narration = store.remember("Now let me run the tests to make sure everything works after the change.",
                               kind="fact", scope="project", project=CWD)[0]
    tools = store.remember("[tool: Bash] [tool: Read /work/shop/src/cart.ts] [tool: Edit /work/shop/src/cart.ts]",
                           kind="fact", scope="project", project=CWD)[0]
    shown = {b["id"] for b in bites(store, SESSIONS[4], "Run the tests after the cart change")}
    assert narration not in shown and tools not in shown


def test_a_rule_that_answers_the_prompt_is_a_bite(engram_home: Path, projects_dir: Path) -> None:
    store = processed(projects_dir, [template_session(n) for n in range(3)])
    rule, _ = store.remember("Deploys go out with `make release` from the main branch; never deploy on Fridays.",
                             kind="convention", scope="project", project=CWD)
    for text in ("The cart total is computed in src/cart.ts from the line items.",
                 "Coupons are validated by the pricing service before checkout.",
                 "The shop uses Stripe test keys in development."):
        store.remember(text, kind="fact", scope="project", project=CWD)
    shown = bites(store, SESSIONS[4], "How do we deploy a release of the shop?")
    assert [b["id"] for b in shown] == [rule] and shown[0]["bite"].startswith("Deploys go out with `make release`")


def test_what_a_statement_is() -> None:
    assert is_narration("Now let me run the tests to make sure everything works.")
    assert is_narration("All 27 tests pass.") and is_narration("You're absolutely right! Let me fix it.")
    assert is_tool_list("[tool: Grep] [tool: Read /a/b.py] done")
    assert not states_something("…the table must be rewritten")  # a cut-off fragment
    assert not states_something("The tests pass … and the build is green … after the change")  # excerpts
    assert states_something("SQLite doesn't support `ALTER TABLE … MODIFY`, so the table must be rewritten.")
    assert states_something("SQLite doesn't support ALTER TABLE MODIFY, so the table must be rewritten.")
    assert states_something("always use uv, never pip, in this repo")  # a user's rule, typed in lower case


def test_bad_prompts_get_nothing_and_break_nothing(engram_home: Path, projects_dir: Path) -> None:
    store = processed(projects_dir, [template_session(n) for n in range(3)])
    rule, _ = store.remember("Deploys go out with `make release` from the main branch; never deploy on Fridays.",
                             kind="convention", scope="project", project=CWD)
    log = "\n".join(f"2026-11-01 10:00:{n % 60:02d} ERROR worker-{n} timeout after 30s" for n in range(5_000))
    for n, prompt in enumerate((log, "请帮我修复部署脚本中的错误", "ok", " ", "🙂🙂🙂")):
        assert bites(store, SESSIONS[n % 2 + 3], prompt) == [], prompt[:40]
    # One word may still name what a rule is about: the rule, and nothing the rules forbid.
    assert {b["id"] for b in bites(store, SESSIONS[4], "deploy")} <= {rule}


def test_a_template_typed_fifty_times_and_an_agentic_session_give_nothing(engram_home: Path,
                                                                          projects_dir: Path) -> None:
    sessions = []
    for n in range(50):
        start = f"2026-10-{n % 28 + 1:02d}T{n % 20:02d}:00:00"
        c = Conversation(f"33333333-0000-4000-8000-{n:012d}", cwd=CWD, start=start)
        c.user(TEMPLATE.format(n=n + 100))
        c.bash(f"bd show shop-{n + 100}", f"shop-{n + 100}: item {n}")
        c.say(f"Closed shop-{n + 100}.", end_turn=True)
        sessions.append(c)
    agentic = Conversation("33333333-0000-4000-8000-999999999999", cwd=CWD, start="2026-10-30T10:00:00")
    agentic.say("Starting the scheduled dependency audit.")  # no user prompt at all: a fully agentic session
    agentic.bash("npm audit", "found 0 vulnerabilities")
    agentic.say("The audit found nothing.", end_turn=True)
    store = processed(projects_dir, [*sessions, agentic])
    assert store.conn.execute("SELECT count(*) FROM episodes").fetchone()[0] > 0
    for n in (150, 151):
        assert bites(store, SESSIONS[4], TEMPLATE.format(n=n)) == []


class _Summary:
    """What ``bite_of`` reads of a memory."""

    def __init__(self, summary: str) -> None:
        self.summary = summary


HOOK_LESSON = ("Before `git commit` here, run `pre-commit run --all-files` and stage what it changes: its pre-commit "
               "hook's `trailing-whitespace`, `end-of-file-fixer` rewrite files and stop the commit")  # BookMinder


def test_a_bite_is_whole_sentences_never_one_cut_in_the_middle() -> None:
    assert bite_of(_Summary(HOOK_LESSON), 180) == HOOK_LESSON  # one sentence, longer than the room: whole
    two = "Deploys go out with `make release` from main. " + "They need the VPN up, which takes a minute. " * 3
    assert bite_of(_Summary(two), 60) == "Deploys go out with `make release` from main."
    endless = "word " * 200
    cut = bite_of(_Summary(endless.strip()), 100)
    assert cut.endswith("…") and len(cut) <= 100  # no sentence end in reach: cut, and said to be
