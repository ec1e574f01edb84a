"""Real Claude Code transcript lines, replayed as new sessions (``bench/load.py``'s real mix, ``bench/backfill.py``).

The fixture transcripts (``../shared/fixtures``: the claude-projects sample and the BookMinder sessions) are read
once, in file order, every line kept as written: prompts, replies, thinking, tool uses, tool results (large ones
and images included), and the lines that carry no conversation (summaries, snapshots, queue operations). A
replay hands them out again under new identities, so the processor sees them as sessions it never met:

- every uuid (the line's own, its parent's, any inside the text) gets a tag of 8 hex digits in place of its first
  8, one tag per copy, so a copy's lines keep their links to each other and never collide with another copy's;
- tool-use ids (``toolu_…``, ``srvtoolu_…``) and API message ids (``msg_…``) are tagged the same way, so a tool
  result still pairs with its use and an assistant message's parts still merge;
- ``sessionId`` names the session the copy is written to (several source sessions may follow each other in one
  live session, as a long session does), and ``timestamp`` is the time of writing when asked for.

Large outputs: the fixtures hold few tool outputs over 100 KB, and real sessions run builds, dump logs and
cat encoded files. ``large_outputs`` makes three tool calls with real content: a 1 MB build log (real tool
outputs of the fixtures, concatenated), a 1 MB base64 dump (the same bytes, encoded) and a failed test run of
256 KB (real outputs again, ``is_error``): a Bash use line and its result line each.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
SOURCES = (FIXTURES / "claude-projects", FIXTURES / "bookminder")

_UUID = rb"[0-9a-f]{8}(?=-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
_IDS = re.compile(rb"(?P<uuid>" + _UUID + rb")|(?P<tool>(?:srv)?toolu_)|(?P<msg>\"msg_)"
                  rb"|(?P<session>\"sessionId\":\s*\"[^\"]*\")|(?P<stamp>\"timestamp\":\s*\"[^\"]*\")")


def session_files(roots: tuple[Path, ...] = SOURCES) -> list[Path]:
    """Every main session transcript under the roots (subagent files left out, as capture leaves them out)."""
    files: list[Path] = []
    for root in roots:
        files += sorted(p for p in root.glob("*/*.jsonl") if not p.name.startswith("agent-") and p.stat().st_size)
    if not files:
        raise SystemExit(f"no transcripts under {', '.join(map(str, roots))}: the fixtures are needed")
    return files


def read_sessions(roots: tuple[Path, ...] = SOURCES) -> list[list[bytes]]:
    """Each source session's lines (newline-ended bytes), in file order."""
    sessions = []
    for path in session_files(roots):
        lines = [line if line.endswith(b"\n") else line + b"\n" for line in path.read_bytes().splitlines()]
        sessions.append([line for line in lines if line.strip()])
    return sessions


def iso_now() -> bytes:
    now = time.time()
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z").encode()


def retag(line: bytes, tag: bytes, session_id: str, stamp: bytes | None) -> bytes:
    """The line as a copy tagged `tag` (8 hex digits) writes it, in session `session_id`, stamped `stamp`
    (None: the line keeps its own time)."""
    sid = f'"sessionId":"{session_id}"'.encode()

    def swap(m: re.Match[bytes]) -> bytes:
        if m.group("uuid"):
            return tag
        if m.group("tool"):
            return m.group("tool") + tag
        if m.group("msg"):
            return b'"msg_' + tag
        if m.group("session"):
            return sid
        return m.group(0) if stamp is None else b'"timestamp":"' + stamp + b'"'

    return _IDS.sub(swap, line)


def large_outputs(sessions: list[list[bytes]], cwd: str = "/bench/large") -> list[list[bytes]]:
    """Three tool calls whose results are large, built from the fixtures' real tool outputs: each a Bash use
    line and its result line (ids tagged later like every line's)."""
    outputs: list[str] = []
    for lines in sessions:
        for line in lines:
            if b'"tool_result"' not in line:
                continue
            try:
                content = json.loads(line)["message"]["content"]
            except (ValueError, KeyError, TypeError):
                continue
            for block in content if isinstance(content, list) else []:
                text = block.get("content") if isinstance(block, dict) else None
                if isinstance(text, str) and len(text) > 200:
                    outputs.append(text)
    log = "\n".join(outputs)
    while len(log) < 1 << 20:
        log += "\n" + log
    encoded = base64.b64encode(log.encode()[: 3 << 18]).decode()  # 1 MB of base64
    wrapped = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    failure = log[-(1 << 18):] + "\nFAILED tests/test_audio.py::test_export - AssertionError"
    cases = [("npm run build 2>&1 | tee build.log", log[: 1 << 20], False),
             ("base64 assets/recording.wav", wrapped, False),
             ("uv run pytest -x", failure, True)]
    made = []
    for n, (command, output, failed) in enumerate(cases):
        use_id = f"toolu_00000000large{n:04d}"
        use_uuid, result_uuid = f"00000000-0000-4000-8000-1a{n:010x}", f"00000000-0000-4000-8000-2b{n:010x}"
        use = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": cwd,
               "sessionId": "00000000-0000-0000-0000-000000000000", "version": "2.1.114", "gitBranch": "main",
               "type": "assistant", "uuid": use_uuid, "timestamp": "2026-01-01T00:00:00.000Z",
               "message": {"id": f"msg_00000000large{n}", "type": "message", "role": "assistant", "model": "claude",
                           "content": [{"type": "tool_use", "id": use_id, "name": "Bash",
                                        "input": {"command": command, "description": "run it"}}]}}
        result = {**use, "type": "user", "parentUuid": use_uuid, "uuid": result_uuid,
                  "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id,
                                                           "content": output, "is_error": failed}]}}
        made.append([(json.dumps(use) + "\n").encode(), (json.dumps(result) + "\n").encode()])
    return made


class Replay:
    """The fixtures' lines as one live session writes them: source sessions one after another (each writer
    starting at a different one), a large output every `large_every` lines, new tags on every pass."""

    def __init__(self, sessions: list[list[bytes]], large: list[list[bytes]], writer: int, writers: int,
                 large_every: int = 2000) -> None:
        self.sessions = sessions
        self.large = large
        self.writer = writer
        self.start = writer * len(sessions) // max(1, writers)
        self.large_every = large_every

    def lines(self, session_id: str) -> Iterator[bytes]:
        """Lines for `session_id`, forever, stamped with the time each is handed out."""
        written, copy, large = 0, 0, 0
        while True:
            for k in range(len(self.sessions)):
                copy += 1
                tag = f"{self.writer:02x}{copy:06x}".encode()
                for line in self.sessions[(self.start + k) % len(self.sessions)]:
                    if self.large and self.large_every and written and written % self.large_every == 0:
                        large += 1
                        for extra in self.large[large % len(self.large)]:
                            yield retag(extra, f"{self.writer:02x}{large:04x}ff".encode(), session_id, iso_now())
                    written += 1
                    yield retag(line, tag, session_id, iso_now())


def prompts(sessions: list[list[bytes]], limit: int = 400) -> list[str]:
    """Typed user prompts of the fixtures (their first 12 words), as /recall queries."""
    found: list[str] = []
    for lines in sessions:
        for line in lines:
            if b'"type":"user"' not in line.replace(b" ", b"") or b'"tool_result"' in line:
                continue
            try:
                content = json.loads(line)["message"]["content"]
            except (ValueError, KeyError, TypeError):
                continue
            text = content if isinstance(content, str) else " ".join(
                b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
            words = text.split()
            if len(words) >= 4 and not text.startswith(("<", "[")):
                found.append(" ".join(words[:12]))
            if len(found) >= limit:
                return found
    return found
