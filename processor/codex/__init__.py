"""Registration with the Codex CLI: hooks, their trust, and the MCP server (``settings``)."""
