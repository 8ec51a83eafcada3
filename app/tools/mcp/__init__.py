"""The ``mcp`` tool kind: remote MCP tools run by the gateway.

The tool (the ``core.tools`` / ``tools.toolkit`` side):
- ``provider``: ``McpToolProvider``, a request's ``{"type": "mcp"}`` tools (the servers they
  name) as function tools;
- ``servers``: the servers a request may reach (configured ones, ``McpPolicy`` for a
  ``server_url``), one request's server, its ``require_approval`` policy;
- ``listing``: the servers' tool listings and their ``mcp_list_tools`` items;
- ``executor``: ``McpToolExecutor``, one call (``mcp_call`` / ``mcp_approval_request`` items);
- ``approvals``: the client's approval answers as calls to run;
- ``lowering``: MCP history items as the upstream reads them.

The client, on the official ``mcp`` SDK (transports kept apart from the session):
- ``spec``: ``McpServerSpec``, where and how to reach a server (no SDK import);
- ``transport``: the SDK transport for a spec (stdio, SSE, streamable HTTP on httpx2, every
  connection through the egress policy);
- ``client``: ``McpSession``, one connected server usable from any task;
- ``pool``: ``McpSessionPool``, the configured servers' long-lived sessions;
- ``errors``: ``McpError`` (OpenAI ``McpToolCallError`` objects) and the SDK failure mapping;
- ``outcomes``: listed tools and call results.
"""
