"""Network edges every adapter shares: the egress policy (``egress``; its resolver port,
``resolver``; the connectors that pin its addresses, ``egress_aiohttp`` and ``egress_httpx``)
and the HTTP client helpers (``http``)."""
