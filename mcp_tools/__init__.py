"""Engram's MCP server (`engram mcp`): memory tools the agent calls on purpose."""
