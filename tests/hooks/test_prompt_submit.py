"""The optional UserPromptSubmit hook: off unless enabled; when on, the processor's recollection for the
prompt if it is already written, else bites from `POST /recall` within a 150 ms budget; never the
token to a processor that is not running; nothing (exit 0, empty stdout) on any bad input. Plus its
registration by `engram install --prompt-submit`. The hook runs as the exact registered command
against a real ControlServer holding the real instance lock."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from processor.capture.project import project_root as processor_project_root
from processor.files import write_atomic
from processor.hook_kit import hook_io
from processor.hook_kit import hook_io as fence
from processor.hook_kit.project import project_root
from processor.install import claude
from processor.install.json_file import add_hook_specs, remove_hooks
from processor.install.plugin import plugin_files
from processor.install.registration import PROMPT_SUBMIT_MARKER, Registration, hook_python
from processor.recall.digest import write_digest_ids
from processor.service.control_server import ControlServer
from processor.service.pidfile import PidFile
from recall_hook import prompt_submit

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "recall_hook" / "pretooluse.py"
SCRIPT = REPO / "recall_hook" / "prompt_submit.py"
SESSION = "7d2e9f10-3c4b-4a5d-8e6f-9a0b1c2d3e4f"
PYTHON = hook_python()
REGISTRATION = Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK, prompt_submit=True)
ARGV = shlex.split(claude.hook(REGISTRATION, "UserPromptSubmit").command)
PRETOOLUSE_ARGV = shlex.split(claude.hook(REGISTRATION, "PreToolUse").command)


def bite(eid: str, text: str, **extra: Any) -> dict[str, Any]:
    """A bite as `POST /recall` returns it (processor.memory.episode_store.Hit)."""
    return {"id": eid, "bite": text, "date": "2026-11-20", "importance": "normal", "kind": "fact",
            "score": 0.61, "source": "episode", "project": None, **extra}


BITES = [bite("ep_db", "staging DB is PostgreSQL 16 on port 6543"), bite("ep_deploy", "never deploy on Fridays"),
         bite("ep_css", "brand colour is #ff5a1f")]


def prompt_event(prompt: object = "How do I reach the staging database?", session_id: object = SESSION,
                 cwd: str = "/home/u/proj", **extra: object) -> bytes:
    """A UserPromptSubmit event as Claude Code writes it to the hook's stdin."""
    return json.dumps({"session_id": session_id, "transcript_path": f"/home/u/.claude/projects/-p/{session_id}.jsonl",
                       "cwd": cwd, "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                       "prompt": prompt, **extra}).encode()


class FakeProcessor:
    """A real ControlServer with a scripted /recall, and the real instance lock held."""

    def __init__(self, home: Path) -> None:
        self.run_dir = home / "run"
        self.calls: list[dict[str, Any]] = []
        self.answer: Callable[[dict[str, Any]], dict[str, Any]] = lambda body: {"bites": BITES}
        self.lock = PidFile(self.run_dir)
        self.server = ControlServer(self.run_dir, port=0, routes={("POST", "/recall"): self._recall})

    def _recall(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(body)
        return self.answer(body)

    def start(self) -> FakeProcessor:
        self.lock.acquire()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.lock.release()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "engram-home"
    (root / "recollections").mkdir(parents=True, mode=0o700)
    return root


@pytest.fixture
def processor(home: Path) -> Iterator[FakeProcessor]:
    fake = FakeProcessor(home).start()
    yield fake
    fake.stop()


@pytest.fixture
def env(tmp_path: Path, home: Path) -> dict[str, str]:
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(user_home), "ENGRAM_HOME": str(home),
            "ENGRAM_PROMPT_SUBMIT_ENABLED": "1"}


def run(env: dict[str, str], stdin: bytes, argv: list[str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv or ARGV, input=stdin, capture_output=True, timeout=30, env=env, cwd="/")


def context_of(proc: subprocess.CompletedProcess[bytes]) -> str:
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    out = json.loads(proc.stdout)
    context = out["hookSpecificOutput"]["additionalContext"]
    # Beside the context, the user's line naming what was injected (the show_injected setting).
    ids = re.findall(r"\(id: ([^)]+)\)", context)
    assert out == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": context},
                   "systemMessage": hook_io.injected_line(ids)}
    assert context.startswith(fence.FENCE_OPEN + "\n") and context.endswith("\n" + fence.FENCE_CLOSE)
    return context


def silent(proc: subprocess.CompletedProcess[bytes]) -> None:
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def marker(home: Path) -> dict[str, Any]:
    return json.loads((home / "recollections" / f"{SESSION}.prompt").read_text())


def write_recollection(home: Path, message_uuid: str, bites: list[dict[str, Any]], age_ms: int = 0) -> None:
    data = {"messageUuid": message_uuid, "timestamp": int(time.time() * 1000) - age_ms, "bites": bites}
    (home / "recollections" / f"{SESSION}.json").write_text(json.dumps(data))


# --- off by default -----------------------------------------------------------------------------


def test_disabled_by_default_it_says_nothing_and_asks_nothing(processor: FakeProcessor, env: dict[str, str]) -> None:
    del env["ENGRAM_PROMPT_SUBMIT_ENABLED"]
    silent(run(env, prompt_event()))
    assert processor.calls == []


@pytest.mark.parametrize("value", ["0", "false", "off", "no"])
def test_the_environment_switches_it_off(processor: FakeProcessor, env: dict[str, str], home: Path,
                                         value: str) -> None:
    (home / "config.toml").write_text("prompt_submit_enabled = true\n")
    env["ENGRAM_PROMPT_SUBMIT_ENABLED"] = value
    silent(run(env, prompt_event()))
    assert processor.calls == []


def test_config_toml_switches_it_on(processor: FakeProcessor, env: dict[str, str], home: Path) -> None:
    del env["ENGRAM_PROMPT_SUBMIT_ENABLED"]
    (home / "config.toml").write_text("# engram\nprompt_submit_enabled = true\nprompt_submit_budget_ms = 400\n")
    assert "ep_db" in context_of(run(env, prompt_event()))
    (home / "config.toml").write_text("prompt_submit_enabled = [broken\n")
    silent(run(env, prompt_event(prompt="another one")))


# --- bites from the processor --------------------------------------------------------------------


def test_bites_from_recall_are_injected_and_remembered(processor: FakeProcessor, env: dict[str, str],
                                                       home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "api").mkdir()
    context = context_of(run(env, prompt_event(cwd=str(repo / "api"))))
    # "unasked": the processor answers with what clears the bar of a user message's bites, not a ranking.
    assert processor.calls == [{"query": "How do I reach the staging database?", "limit": 3, "unasked": True,
                                "project": str(repo)}]
    lines = context.splitlines()
    assert lines[2] == "- [2026-11-20, normal] staging DB is PostgreSQL 16 on port 6543 (id: ep_db)"
    assert len([line for line in lines if line.startswith("- [")]) == 3 and "memory_expand(id)" in context
    assert marker(home)["shown"] == ["ep_db", "ep_deploy", "ep_css"]
    assert os.stat(home / "recollections" / f"{SESSION}.prompt").st_mode & 0o777 == 0o600


def test_a_later_prompt_does_not_repeat_what_was_shown(processor: FakeProcessor, env: dict[str, str],
                                                       home: Path) -> None:
    context_of(run(env, prompt_event()))
    processor.answer = lambda body: {"bites": [BITES[1], bite("ep_new", "the VPN drops after 8 hours")]}
    context = context_of(run(env, prompt_event(prompt="and the VPN?")))
    assert "ep_new" in context and "ep_deploy" not in context
    assert marker(home)["shown"][:2] == ["ep_new", "ep_db"]
    processor.answer = lambda body: {"bites": BITES[:2]}
    silent(run(env, prompt_event(prompt="again")))  # nothing new to say


def test_what_the_sessions_digest_showed_is_not_repeated(processor: FakeProcessor, env: dict[str, str],
                                                         home: Path) -> None:
    # The processor's recollection was not ready within the budget, so /recall answered: it does not know the
    # session's SessionStart digest, which already showed ep_db.
    write_digest_ids(str(home / "recollections"), SESSION, ["ep_db"])
    context = context_of(run(env, prompt_event()))
    assert "ep_db" not in context and "ep_deploy" in context


def test_the_processor_decides_what_clears_the_bar(processor: FakeProcessor, env: dict[str, str]) -> None:
    """The hook asks for the bar of a user message's bites and shows what comes back; silence when nothing."""
    processor.answer = lambda body: {"bites": [bite("ep_ok", "related", relevance=0.4)]} if body.get(
        "unasked") is True else {"bites": [bite("ep_ranked", "a ranking, not a bite")]}
    context = context_of(run(env, prompt_event()))
    assert "ep_ok" in context and "ep_ranked" not in context
    processor.answer = lambda body: {"bites": []}
    silent(run(env, prompt_event(prompt="something else entirely")))


def test_a_fresh_recollection_is_preferred_and_claimed(processor: FakeProcessor, env: dict[str, str],
                                                       home: Path) -> None:
    mine = [{"id": "ep_writer", "bite": "from the writer", "date": "2026-11-21", "importance": "high"}]
    write_recollection(home, "msg-1", mine)
    context = context_of(run(env, prompt_event()))
    assert "(id: ep_writer)" in context and "ep_db" not in context
    assert processor.calls == []
    # Claimed like the PreToolUse hook claims it: the first tool call of the turn stays silent.
    assert json.loads((home / "recollections" / f"{SESSION}.state").read_text()) == {
        "lastInjectedMessageUuid": "msg-1"}
    tool_event = json.dumps({"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                             "tool_input": {"command": "ls"}}).encode()
    silent(run(env, tool_event, PRETOOLUSE_ARGV))


def test_a_fresh_recollection_with_nothing_relevant_means_nothing(processor: FakeProcessor, env: dict[str, str],
                                                                  home: Path) -> None:
    write_recollection(home, "msg-1", [])
    silent(run(env, prompt_event()))
    assert processor.calls == []


def test_the_previous_messages_recollection_is_not_repeated(processor: FakeProcessor, env: dict[str, str],
                                                            home: Path) -> None:
    old = [{"id": "ep_db", "bite": "staging DB", "date": "2026-11-21", "importance": "normal"}]
    write_recollection(home, "msg-0", old, age_ms=60_000)
    context = context_of(run(env, prompt_event()))
    assert processor.calls and "ep_db" not in context and "ep_deploy" in context
    assert not (home / "recollections" / f"{SESSION}.state").exists()


def _transcript(tmp_path: Path, *entries: dict[str, Any]) -> Path:
    path = tmp_path / "transcript.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _prompt_line(uid: str, content: object, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": uid, "sessionId": SESSION, "message": {"role": "user", "content": content},
            **extra}


def test_the_prompts_own_line_decides_which_recollection_is_fresh(processor: FakeProcessor, env: dict[str, str],
                                                                  home: Path, tmp_path: Path) -> None:
    prompt = "How do I reach the staging database?"
    transcript = _transcript(tmp_path, _prompt_line("msg-1", "earlier prompt"),
                             {"type": "assistant", "uuid": "a-1", "message": {"content": "sure"}},
                             _prompt_line("msg-2", [{"type": "text", "text": prompt + "\n"}]),
                             {"type": "attachment", "uuid": "x", "attachment": {"type": "hook_success"}})
    # Written a moment ago, but for the previous prompt: not this one's, however recent.
    write_recollection(home, "msg-1", [{"id": "ep_prev", "bite": "previous", "date": "2026-11-21",
                                        "importance": "normal"}])
    context = context_of(run(env, prompt_event(prompt=prompt, transcript_path=str(transcript))))
    assert processor.calls and "ep_prev" not in context and "ep_db" in context
    # This prompt's recollection is used, however old its timestamp.
    write_recollection(home, "msg-2", [{"id": "ep_mine", "bite": "mine", "date": "2026-11-21",
                                        "importance": "normal"}], age_ms=3_600_000)
    processor.calls.clear()
    context = context_of(run(env, prompt_event(prompt=prompt, transcript_path=str(transcript))))
    assert "ep_mine" in context and processor.calls == []


def test_without_the_prompts_line_an_already_injected_recollection_is_not_fresh(
        processor: FakeProcessor, env: dict[str, str], home: Path) -> None:
    write_recollection(home, "msg-1", [{"id": "ep_prev", "bite": "previous", "date": "2026-11-21",
                                        "importance": "normal"}])
    (home / "recollections" / f"{SESSION}.state").write_text('{"lastInjectedMessageUuid": "msg-1"}')
    context = context_of(run(env, prompt_event(transcript_path="/nonexistent/t.jsonl")))
    assert processor.calls and "ep_prev" not in context


@pytest.mark.parametrize("entries", [
    [], [_prompt_line("m", "another prompt")], [_prompt_line("m", "the prompt", isMeta=True)],
    [{"type": "assistant", "uuid": "m", "message": {"content": "the prompt"}}],
    [_prompt_line(7, "the prompt")], [_prompt_line("m", {"text": "the prompt"})],
])
def test_prompt_line_lookup_finds_only_a_real_prompt_line(tmp_path: Path, entries: list[dict[str, Any]]) -> None:
    assert prompt_submit.prompt_line_uuid(str(_transcript(tmp_path, *entries)), "the prompt") is None


def test_prompt_line_lookup_reads_only_the_tail(tmp_path: Path) -> None:
    filler = [{"type": "progress", "uuid": f"p{i}", "data": "x" * 1000} for i in range(300)]
    path = _transcript(tmp_path, _prompt_line("old", "the prompt"), *filler, _prompt_line("new", " the prompt "))
    assert prompt_submit.prompt_line_uuid(str(path), "the prompt") == "new"
    path = _transcript(tmp_path, _prompt_line("old", "the prompt"), *filler)
    assert prompt_submit.prompt_line_uuid(str(path), "the prompt") is None  # 300 KB back: not this prompt's
    for bad in (None, 5, "relative.jsonl", str(tmp_path), "/nonexistent"):
        assert prompt_submit.prompt_line_uuid(bad, "the prompt") is None


def test_a_slow_processor_is_abandoned_within_the_budget(processor: FakeProcessor, env: dict[str, str]) -> None:
    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(2)
        return {"bites": BITES}

    processor.answer = slow
    started = time.monotonic()
    proc = run(env, prompt_event())
    elapsed = time.monotonic() - started
    silent(proc)
    assert processor.calls  # it did ask…
    assert elapsed < 1.5, elapsed  # …and gave up after ~150 ms (plus interpreter start-up), not 2 s


def test_the_budget_is_configurable(processor: FakeProcessor, env: dict[str, str]) -> None:
    def slowish(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.3)
        return {"bites": BITES}

    processor.answer = slowish
    silent(run(env, prompt_event()))
    env["ENGRAM_PROMPT_SUBMIT_BUDGET_MS"] = "1500"
    assert "ep_db" in context_of(run(env, prompt_event(prompt="second")))
    env["ENGRAM_PROMPT_SUBMIT_BUDGET_MS"] = "lots"  # unreadable: the default
    assert prompt_submit.budget_seconds("/nonexistent") == hook_io.PROMPT_SUBMIT_BUDGET_MS_DEFAULT / 1000


# --- never the token to the wrong party ------------------------------------------------------------


@pytest.fixture
def stray_listener(home: Path) -> Iterator[socket.socket]:
    """Port and token files left behind, and some other program listening on that port; no instance lock."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    run_dir = home / "run"
    run_dir.mkdir(mode=0o700)
    write_atomic(run_dir / "engram.port", f"{listener.getsockname()[1]}\n")
    write_atomic(run_dir / "token", "t" * 43 + "\n")
    yield listener
    listener.close()


def test_no_running_processor_means_no_request(stray_listener: socket.socket, env: dict[str, str]) -> None:
    silent(run(env, prompt_event()))
    with pytest.raises(BlockingIOError):
        stray_listener.accept()  # nobody connected: the token went nowhere


def test_a_token_readable_by_others_is_not_used(processor: FakeProcessor, env: dict[str, str], home: Path) -> None:
    os.chmod(home / "run" / "token", 0o644)
    silent(run(env, prompt_event()))
    assert processor.calls == []


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stdin", [
    b"", b"  \n", b"{", b"not json", b"[]", b"null", b"\xff\xfe", b'{"session_id": "' + b"x" * (2 << 20) + b'"}',
    prompt_event(prompt=""), prompt_event(prompt="   "), prompt_event(prompt=None), prompt_event(prompt=["a"]),
    prompt_event(session_id=None), prompt_event(session_id="../../etc/passwd"), prompt_event(session_id=".hidden"),
    prompt_event(session_id=7), prompt_event(session_id="x" * 200),
])
def test_bad_stdin_prints_nothing(processor: FakeProcessor, env: dict[str, str], stdin: bytes) -> None:
    silent(run(env, stdin))
    assert processor.calls == []


@pytest.mark.parametrize("answer", [
    {"bites": "nope"}, {"bites": None}, {}, {"bites": [1, "x", None]},
    {"bites": [{"id": "ep_x", "bite": "no date", "importance": "normal"}]},
    {"bites": [bite("ep_x", "bad importance", importance="urgent")]},
    {"bites": [bite("bad\nid", "text")]}, {"bites": [bite("e" * 200, "id too long")]}, {"bites": [bite("ep_x", "   ")]},
])
def test_bad_answers_print_nothing(processor: FakeProcessor, env: dict[str, str], answer: dict[str, Any],
                                   home: Path) -> None:
    processor.answer = lambda body: answer
    silent(run(env, prompt_event()))
    assert not (home / "recollections" / f"{SESSION}.prompt").exists()


def test_an_error_status_prints_nothing(processor: FakeProcessor, env: dict[str, str]) -> None:
    def broken(body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")

    processor.answer = broken
    silent(run(env, prompt_event()))


def test_a_garbage_speaking_server_prints_nothing(home: Path, env: dict[str, str]) -> None:
    """A locked instance whose port answers with something that is not HTTP."""
    lock = PidFile(home / "run")
    lock.acquire()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    write_atomic(home / "run" / "engram.port", f"{listener.getsockname()[1]}\n")
    write_atomic(home / "run" / "token", "t" * 43 + "\n")

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(b"\x00\x01garbage\r\n\r\n{\"bites\": []}" if _ == 0 else b"HTTP/1.0 200 OK\r\n\r\n{[")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        silent(run(env, prompt_event()))
        silent(run(env, prompt_event(prompt="two")))
    finally:
        thread.join(timeout=5)
        listener.close()
        lock.release()


def test_the_plain_script_form_works_too(processor: FakeProcessor, env: dict[str, str]) -> None:
    proc = run(env, prompt_event(), [PYTHON, "-I", "-S", str(SCRIPT)])
    assert "ep_db" in context_of(proc)


def test_the_hook_imports_nothing_outside_the_standard_library() -> None:
    probe = ("import sys; sys.argv=['x', %r]; exec(compile(%r, 'l', 'exec'))\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('processor', 'numpy', 'apsw')))")
    code = probe % (str(SCRIPT), prompt_submit.LAUNCHER.replace(";prompt_submit.main()", ""))
    out = subprocess.run([PYTHON, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "[]", out.stderr


# --- the project: one implementation for the hooks and capture ------------------------------------


def test_the_project_is_the_repository_its_worktrees_share(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git" / "worktrees" / "feature").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "feature" / "commondir").write_text("../..\n")
    (repo / "a" / "b").mkdir(parents=True)
    worktree = tmp_path / "wt-feature"
    (worktree / "src").mkdir(parents=True)
    (worktree / ".git").write_text(f"gitdir: {repo}/.git/worktrees/feature\n")
    relative_wt = tmp_path / "wt-relative"
    relative_wt.mkdir()
    (relative_wt / ".git").write_text("gitdir: ../repo/.git/worktrees/feature\n")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / ".git").write_text("not a gitdir line\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    expected = {repo: repo, repo / "a" / "b": repo, str(repo / "a") + "/": repo, worktree / "src": repo,
                relative_wt: repo, odd: odd, tmp_path / "missing": tmp_path / "missing",
                "relative/path": "relative/path"}
    for cwd, root in expected.items():
        assert project_root(str(cwd)) == str(root), cwd
    # Capture asks the same function (cached): the hooks and the processor name one project alike.
    assert processor_project_root(str(worktree / "src")) == str(repo)
    # A folder in no repository: its own project (the walk up stops at /).
    assert project_root(str(plain)) in (str(plain), *(str(p) for p in plain.parents))


# --- registration ------------------------------------------------------------------------------------


def _groups(settings_path: Path, event: str) -> list[dict[str, Any]]:
    return json.loads(settings_path.read_text()).get("hooks", {}).get(event, [])


def test_install_registers_it_only_when_asked_and_keeps_other_prompt_hooks(tmp_path: Path) -> None:
    settings_path, mcp_path = tmp_path / "settings.json", tmp_path / ".claude.json"
    user_group = {"hooks": [{"type": "command", "command": "~/bin/prompt-guard"}]}
    settings_path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [user_group]}}))
    plain = Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK)

    def install(registration: Registration) -> claude.ChangeReport:
        return claude.install(registration, settings_path=settings_path, mcp_config_path=mcp_path)

    install(plain)
    assert _groups(settings_path, "UserPromptSubmit") == [user_group]

    install(REGISTRATION)
    expected = [user_group, {"hooks": [claude.hook(REGISTRATION, "UserPromptSubmit").entry()]}]
    assert _groups(settings_path, "UserPromptSubmit") == expected
    assert PROMPT_SUBMIT_MARKER in expected[1]["hooks"][0]["command"]
    report = install(REGISTRATION)
    assert not report.changed  # twice = once

    install(plain)  # a plain re-install keeps the user's choice
    assert _groups(settings_path, "UserPromptSubmit") == expected

    install(Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK, prompt_submit=False))
    assert _groups(settings_path, "UserPromptSubmit") == [user_group]

    install(REGISTRATION)
    claude.uninstall(settings_path=settings_path, mcp_config_path=mcp_path)
    assert json.loads(settings_path.read_text()) == {"hooks": {"UserPromptSubmit": [user_group]}}


def test_a_plain_install_refreshes_a_moved_prompt_hook_in_place(tmp_path: Path) -> None:
    old = {"type": "command", "command": "/old/python -I -S /old/checkout/recall_hook/prompt_submit.py",
           "timeout": 5}
    settings = {"hooks": {"UserPromptSubmit": [{"hooks": [old]}]}}
    plain = Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK)
    merged = add_hook_specs(settings, claude.hook_specs(plain), tmp_path / "settings.json")
    assert merged["hooks"]["UserPromptSubmit"] == [{"hooks": [claude.hook(REGISTRATION, "UserPromptSubmit").entry()]}]
    assert remove_hooks(merged, tmp_path / "settings.json") == {}


def test_the_plugin_has_the_prompt_hook_only_when_asked() -> None:
    plain = Registration(hook_python=PYTHON, engram_python=PYTHON, hook_script=HOOK)
    assert "UserPromptSubmit" not in plugin_files(plain)[Path("hooks") / "hooks.json"]["hooks"]
    hooks = plugin_files(REGISTRATION)[Path("hooks") / "hooks.json"]["hooks"]
    assert hooks["UserPromptSubmit"] == [{"hooks": [claude.hook(REGISTRATION, "UserPromptSubmit").entry()]}]


def test_the_registered_command_is_silent_on_empty_stdin(env: dict[str, str]) -> None:
    silent(run(env, b""))


def test_fence_and_format_are_the_hooks_shared_ones() -> None:
    assert prompt_submit._io is hook_io
    assert hook_io.format_context(["- x"]).startswith(fence.FENCE_OPEN)
