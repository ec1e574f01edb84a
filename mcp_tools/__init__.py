"""Engram's MCP tools: ``server`` (the tools, on the official SDK) and ``bridge`` (what Claude Code starts)."""

# The bridge names the directory Claude Code started it in (percent-encoded): the processor serves every
# session, so each request says which project is "this project".
PROJECT_HEADER = "X-Engram-Cwd"
# ... and the Claude Code session that started it ($CLAUDE_CODE_SESSION_ID), for the tools' same-session search.
SESSION_HEADER = "X-Engram-Session"
# How long one tool call may take, at the processor and at the bridge: a search or a small write takes
# milliseconds; past this the bridge moves the session to a server of its own. Below Claude Code's own
# tool timeout.
CALL_TIMEOUT_SECONDS = 30.0
