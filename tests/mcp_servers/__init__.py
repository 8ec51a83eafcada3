"""Real MCP servers for the tests: counter (Python MCPServer) and server-everything (npm)."""
