"""Claude Code registration: the hooks and MCP server in its settings, and the same as a plugin folder."""
