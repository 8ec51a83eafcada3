"""Anthropic's Messages API (``POST /v1/messages``) over the Responses kernel.

- ``requests``: a Messages request body -> a Responses request body (its tools: ``tools``).
- ``responses``: a final Response -> a Messages ``Message``.
- ``stream``: Responses stream events -> Anthropic's SSE events.
- ``errors``: a ``GatewayError`` -> Anthropic's error envelope and status.
- ``tokens``: ``count_tokens``' estimate (tiktoken).
"""
