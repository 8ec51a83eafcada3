"""Gateway-owned tools: MCP servers (client, URL checks, executor) and the tool registry."""
