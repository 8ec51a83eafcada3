"""The ``mcp`` tool kind: remote MCP tools run by the gateway.

``provider`` is the tool provider and its executor; ``client`` the MCP client on the ``mcp``
SDK (sessions, the session pool).
"""
