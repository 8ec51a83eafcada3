"""Gateway-owned tools: one module or package per tool kind (MCP, web search, file search), each
a ``core.tools.ToolProvider``, put together by ``toolkit.GatewayToolKit``; ``hosted`` says what
happens to the hosted tools the gateway cannot run."""
