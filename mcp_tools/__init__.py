"""Engram's MCP tools: ``server`` (the tools, on the official SDK) and ``bridge`` (what Claude Code starts)."""

# The bridge names the directory Claude Code started it in (percent-encoded): the processor serves every
# session, so each request says which project is "this project".
PROJECT_HEADER = "X-Engram-Cwd"
# ... and the Claude Code session that started it ($CLAUDE_CODE_SESSION_ID), for the tools' same-session search.
SESSION_HEADER = "X-Engram-Session"
