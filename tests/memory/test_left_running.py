"""What a background start runs, and which shell calls stop processes, as real sessions' commands wrote them."""

from __future__ import annotations

import pytest

from processor.hook_kit.tool_keys import kills
from processor.memory.left_running import Start, left_running, told_together
from processor.store.tool_calls import StoredToolCall


@pytest.mark.parametrize(("command", "stops"), [
    ("lsof -ti :3000 | xargs kill -9 2>/dev/null; sleep 1; echo \"Port 3000 cleared\"", True),
    ("kill $(lsof -ti:3000) 2>/dev/null; sleep 1; pnpm --filter api dev &>/tmp/api-dev.log &", True),
    ("kill 57839 57625 2>/dev/null; sleep 1; pgrep -fl ngrok || echo \"ngrok killed\"", True),
    ("pkill -f \"nest start\" 2>/dev/null; pkill -f \"vite\" 2>/dev/null; echo \"cleaned up\"", True),
    ("lsof -ti :3000 :5173 2>/dev/null || echo \"all ports free\"", False),  # looks only
    ("grep -i \"kill\" apps/api/src/main.ts", False),  # the word, not the program
])
def test_which_shell_calls_stop_processes(command: str, stops: bool) -> None:
    assert kills(command) is stops


@pytest.mark.parametrize(("command", "runs"), [
    ("pnpm --filter web dev 2>&1 | head -20", "pnpm --filter web dev"),
    ("DB_HOST=192.168.133.114 REDIS_HOST=192.168.133.114 pnpm --filter api dev 2>&1", "pnpm --filter api dev"),
    ("ngrok http 3000", "ngrok http 3000"),
])
def test_what_a_background_start_runs(command: str, runs: str) -> None:
    assert Start("m", command, None, 0, "s").runs == runs


def _call(at: int, tool: str, target: str, session: str = "s2") -> StoredToolCall:
    return StoredToolCall(f"toolu_{at}", session, f"u{at}", at, tool, target, False, None, f"r{at}", at + 1)


def test_a_start_is_left_running_until_a_later_call_stops_it() -> None:
    api, web = Start("m1", "pnpm --filter api dev", "bf99c5a", 100, "s1"), Start("m2", "pnpm --filter web dev",
                                                                                 "b272b82", 110, "s1")
    assert left_running([api, web], []) == [api, web]
    assert left_running([api, web], [_call(120, "TaskStop", "bf99c5a", "s1")]) == [web]
    assert left_running([api, web], [_call(90, "Bash", "lsof -ti :3000 | xargs kill -9")]) == [api, web]  # before
    assert left_running([api, web], [_call(200, "Bash", "lsof -ti :3000 | xargs kill -9")]) == []


def test_starts_told_together_are_the_newest_sessions_within_hours_one_a_command() -> None:
    hour = 3_600_000
    ngrok = Start("m0", "ngrok http 3000", "a", 0, "s0")
    old_web = Start("m1", "pnpm --filter web dev", "b", 19 * hour, "s1")
    web = Start("m2", "pnpm --filter web dev 2>&1 | head -20", "c", 20 * hour, "s2")
    api = Start("m3", "pnpm --filter api dev", "d", 21 * hour, "s2")
    ended = {"s0": 1, "s1": 19 * hour + 5, "s2": 21 * hour + 5}
    starts, newest = told_together([ngrok, old_web, web, api], ended) or ([], 0)
    # s0's ngrok, left a day before: gone; s1's web app is the one s2 started again (its newest start is told)
    assert [s.memory_id for s in starts] == ["m2", "m3"] and newest == 21 * hour + 5
    assert told_together([], {}) is None
