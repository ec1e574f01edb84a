"""Registration with the Gemini CLI: hooks and the MCP server in its settings.json (``settings``)."""
