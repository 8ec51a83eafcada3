"""Option groups of the settings that are not about tools: each group is one module here
(``[auth]``, ``[egress]``, ``[limits]``, ``[retention]``, ``[extraction]``, ``[server]``), and
``app.settings.Settings`` holds one field per group. A group is plain pydantic: no adapter is
built here."""
