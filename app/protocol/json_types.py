"""The one JSON alias: a decoded JSON object (request and response bodies, items, events).

Named ``json_types`` so that it never shadows the standard library's ``json`` module.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]
