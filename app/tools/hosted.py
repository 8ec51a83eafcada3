"""Hosted tools the gateway cannot run: left out (``drop``), refused (``reject``) or sent to the
upstream unchanged (``forward``).

OpenAI runs some tool types itself ("hosted" tools: web search, file search, code
interpreter, image generation, remote MCP, server-side tool search …); the client runs the
others (``function``, ``custom``, ``namespace``, ``local_shell``, ``shell``, ``apply_patch``,
``computer*``, ``tool_search`` with ``"execution": "client"`` …) and the gateway passes those
through. The gateway runs some
hosted types itself (``tools.toolkit`` providers); a hosted tool it cannot run (no provider for
the type, or a provider without its backend, e.g. web search with no ``web_search_provider``) is
handled by ``HostedToolPolicy``. Clients such as Codex send a ``web_search`` tool on every turn,
so the default, ``drop``, keeps such a turn working: the model just does not see the tool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)

# drop: leave the tool out; reject: answer 400; forward: send it upstream unchanged.
HostedToolPolicy = Literal["drop", "reject", "forward"]

# The tool types OpenAI runs on its side (the ``openai`` SDK's ``types/responses/tool_param.py``),
# with the prefix of the ``include`` values about their items.
HOSTED_TOOL_TYPES: dict[str, str | None] = {
    "web_search": "web_search_call.",
    "web_search_2025_08_26": "web_search_call.",
    "web_search_preview": "web_search_call.",
    "web_search_preview_2025_03_11": "web_search_call.",
    "file_search": "file_search_call.",
    "code_interpreter": "code_interpreter_call.",
    "image_generation": "image_generation_call.",
    "mcp": "mcp_",
    "tool_search": "tool_search_call.",
    "programmatic_tool_calling": None,
}

SETTING = "hosted_tools"
ENV_VAR = "RESPGATE_HOSTED_TOOLS"


def is_hosted(tool: JsonObject) -> bool:
    """Whether OpenAI, not the client, runs ``tool`` (``tool_search`` only when its
    ``execution`` is not ``"client"``)."""
    kind = tool.get("type")
    if kind not in HOSTED_TOOL_TYPES:
        return False
    return not (kind == "tool_search" and tool.get("execution") == "client")


@dataclass(slots=True)
class HostedTools:
    """What the gateway does with a hosted tool it cannot run, per request: ``policy_for``
    picks the policy for a request body (e.g. from the upstream serving its ``model``). The app
    has one instance, so a dropped tool type is logged once per process."""

    default: HostedToolPolicy = "drop"
    policy_for: Callable[[JsonObject], HostedToolPolicy] | None = None
    _warned: set[str] = field(default_factory=set)

    def policy(self, body: JsonObject) -> HostedToolPolicy:
        return self.policy_for(body) if self.policy_for is not None else self.default

    def handle(
        self, index: int, tool: JsonObject, reason: str | None, policy: HostedToolPolicy
    ) -> bool:
        """Whether to keep ``tools[index]`` for the upstream (``forward``); ``False`` drops it
        (logged once per tool type); ``reject`` raises a 400 naming ``tools[index]``.
        ``reason`` is why the gateway cannot run it (``None``: it has no provider at all)."""
        kind = str(tool.get("type"))
        if policy == "forward":
            return True
        if policy == "reject":
            what = (
                f"{_capitalized(reason)}, so the {kind} tool cannot be used."
                if reason
                else f"This gateway does not run the {kind} tool."
            )
            raise InvalidRequestError(
                f'{what} The operator can set {SETTING} = "drop" to leave it out or "forward" '
                "to send it to an upstream that runs it.",
                param=f"tools[{index}]",
                code="invalid_value",
            )
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(
                "Leaving the %s tool out of requests: %s, and the upstream is not known to run "
                'it. Set %s (%s) to "forward" to send it upstream or "reject" to refuse such '
                "requests.",
                kind,
                reason or "this gateway does not run it",
                SETTING,
                ENV_VAR,
            )
        return False


def dropped_include(include: list[Any], dropped: list[JsonObject]) -> list[Any]:
    """``include`` without the values about the items of the ``dropped`` tools."""
    prefixes = tuple(p for t in dropped if (p := HOSTED_TOOL_TYPES.get(str(t.get("type")))))
    return [value for value in include if not str(value).startswith(prefixes)]


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]
