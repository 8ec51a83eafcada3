"""The ``web_search`` tool kind: web search run by the gateway.

``provider`` is the tool provider and its executor; ``backend`` the search backends.
"""
