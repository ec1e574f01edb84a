"""The fake Messages API (bench/testbed/fake_anthropic.py) answers in both shapes the real one does, in script order."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from bench.testbed.fake_anthropic import FakeAnthropic, Reply, Request

TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]


def post(server: FakeAnthropic, body: dict[str, Any], path: str = "/v1/messages?beta=true") -> tuple[str, bytes]:
    request = urllib.request.Request(server.base_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", "x-api-key": "k",
                                              "x-claude-code-session-id": "s-1"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["content-type"], response.read()


def from_sse(data: bytes) -> dict[str, Any]:
    """Rebuild the message from its event stream, as an SDK client does."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for chunk in data.decode().strip().split("\n\n"):
        name_line, data_line = chunk.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {event['type']}"
        if event["type"] == "message_start":
            message = event["message"]
        elif event["type"] == "content_block_start":
            message["content"].append(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                message["content"][event["index"]]["text"] += delta["text"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif event["type"] == "message_delta":
            message["stop_reason"] = event["delta"]["stop_reason"]
    for index, raw in partial.items():
        message["content"][index]["input"] = json.loads(raw)
    return message


def test_scripted_replies_as_json_and_as_sse() -> None:
    with FakeAnthropic() as server:
        server.script.extend([
            Reply.tools(("Bash", {"command": "echo a"}), ("Bash", {"command": "echo b"}), text="Two at once."),
            Reply.text("Done."),
        ])
        kind, body = post(server, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS})
        first = json.loads(body)
        assert kind == "application/json" and first["stop_reason"] == "tool_use"
        assert [b["type"] for b in first["content"]] == ["text", "tool_use", "tool_use"]
        assert [b["input"]["command"] for b in first["content"][1:]] == ["echo a", "echo b"]

        # A side request (no tools) gets the canned answer and leaves the script alone.
        _, side = post(server, {"model": "m", "messages": [{"role": "user", "content": "title?"}]})
        assert json.loads(side)["content"] == [{"type": "text", "text": "Side answer"}]

        kind, body = post(server, {"model": "m", "stream": True, "tools": TOOLS,
                                   "messages": [{"role": "user", "content": "hi"}]})
        assert kind == "text/event-stream"
        second = from_sse(body)
        assert second["content"] == [{"type": "text", "text": "Done."}] and second["stop_reason"] == "end_turn"

        # The script is used up: the fallback answers, and the request is recorded as unscripted.
        _, body = post(server, {"model": "m", "stream": True, "tools": TOOLS, "messages": []})
        assert from_sse(body)["content"] == [{"type": "text", "text": "OK"}]
        assert len(server.unscripted) == 1 and len(server.conversation) == 3 and len(server.requests) == 4
        assert server.conversation[0].session_id == "s-1"


def test_a_streamed_tool_call_round_trips_and_dynamic_replies_see_the_request() -> None:
    with FakeAnthropic() as server:
        seen: list[Request] = []

        def echo_result(request: Request) -> Reply:
            seen.append(request)
            return Reply.text(request.tool_results()["toolu_x"])

        server.script.extend([Reply.tool("Bash", {"command": "ls -la", "nested": {"a": [1, 2]}}),
                              Reply.from_request(echo_result)])
        _, body = post(server, {"model": "m", "stream": True, "tools": TOOLS, "messages": []})
        [call] = from_sse(body)["content"]
        assert call["name"] == "Bash" and call["input"] == {"command": "ls -la", "nested": {"a": [1, 2]}}
        assert server.conversation[0].reply is not None and server.conversation[0].reply.tool_use_ids == [call["id"]]

        messages = [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x", "content": [{"type": "text", "text": "a.txt"}]}]}]
        _, body = post(server, {"model": "m", "tools": TOOLS, "messages": messages})
        assert json.loads(body)["content"] == [{"type": "text", "text": "a.txt"}]
        assert seen[0].result_index("toolu_x") == 0

        _, count = post(server, {"model": "m", "messages": []}, path="/v1/messages/count_tokens")
        assert json.loads(count) == {"input_tokens": 100}
