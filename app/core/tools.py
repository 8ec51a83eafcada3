"""The tool interface: what the kernel asks of gateway-owned tools, and what a tool kind provides.

The kernel (the tool loop, the service) sees a request's tools through a ``ToolKit``: it
prepares them (``PreparedTools``), runs each call through a ``ToolExecutor``, and asks the
toolkit which ``include`` values it answers and which tool fields are secret; it never names a
tool. A failed tool is data (a ``ToolResult`` with ``ok`` false), never an exception.

A tool kind (``tools/mcp``, ``tools/web_search`` …) is a ``ToolProvider``: it declares itself in
a ``ToolKindSpec`` (tool types, item types and their id prefixes, ``include`` values, secret
fields) and contributes ``ProviderTools`` to each request; ``tools.toolkit.GatewayToolKit``
puts the providers together into the ``ToolKit``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from app.core.tenancy import DEFAULT_TENANT
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject


@dataclass(slots=True)
class GatewayCall:
    """One call the model made to a gateway-owned tool.

    ``item_id`` names the item the client sees (``mcp_…``); ``call_id`` and ``name`` are the
    model's own (the function name the upstream was given).
    """

    item_id: str
    call_id: str
    name: str
    arguments: str
    output_index: int
    approval_request_id: str | None = None


NOT_RUN = "not_run"
"""The ``error_kind`` of a call that was never run (``max_tool_calls``, the response ended)."""


def error_kind_of(status: str) -> str:
    """The ``error_kind`` of an ``error_result`` with item ``status``: ``incomplete`` means
    the call was not run (``not_run``), anything else that it failed (``error``)."""
    return NOT_RUN if status == "incomplete" else "error"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A finished gateway call: the item the client sees and the text the model reads.

    A failed call (``ok`` false) names why in ``error_kind``, a short machine-readable word
    (``timeout``, ``exception``, ``not_run``, ``invalid_arguments``, ``http_status`` ...) that
    the tool-call events carry; ``None`` on success."""

    item: JsonObject
    model_output: str
    ok: bool
    preview: str = ""
    # How long the call itself took, when the executor measured it (a batch's calls each
    # report their own); ``None``: the loop's own measure.
    duration_ms: float | None = None
    error_kind: str | None = None

    def with_kind(self, kind: str) -> ToolResult:
        """This result with ``error_kind`` set to ``kind``."""
        return replace(self, error_kind=kind)


@dataclass(frozen=True, slots=True)
class CallPresentation:
    """How a gateway call appears in a client stream (item type and event names).

    ``arguments_events`` names the delta and done events of the call's arguments (``None``: the
    arguments are not streamed), ``opened_events`` follow ``output_item.added``,
    ``running_events`` are sent when the call starts to run, ``completed_event`` and
    ``failed_event`` precede ``output_item.done``.
    """

    opened_events: tuple[str, ...]
    arguments_events: tuple[str, str] | None
    running_events: tuple[str, ...]
    completed_event: str
    failed_event: str


class ToolExecutor(Protocol):
    """A gateway-owned tool, under the function name the upstream sees."""

    presentation: CallPresentation

    def open_item(self, call: GatewayCall) -> JsonObject:
        """The in-progress item the client sees when the model starts the call."""
        ...

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        """The item that asks the client to approve the call (the response ends there), or
        ``None`` when the call runs without approval. Asked when the model opens the call;
        the item's ``arguments`` are filled in once the model has sent them all."""
        ...

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        """Run the call; a failure is a result (``ok`` false), never an exception."""
        ...

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        """The result of a call that was not run or could not finish (``message`` for both the
        client's item and the model); its ``error_kind`` is ``error_kind_of(status)``."""
        ...


class ToolBatch(Protocol):
    """Runs several calls of one round together (one tool engine batch for one session)."""

    async def run_batch(
        self,
        calls: Sequence[GatewayCall],
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> list[ToolResult]:
        """One result per call, in call order; failures are results. ``timeout`` is per call."""
        ...


class NamedTool(Protocol):
    """An executor that names its tool for logs and hooks (``namespace::tool``); the others
    are named by their upstream function name."""

    qualified_name: str


class BatchedToolExecutor(ToolExecutor, Protocol):
    """An executor whose calls of one round go to its ``batch`` together with the other calls
    of the same batch (the loop groups them), instead of one ``run`` each."""

    batch: ToolBatch


# Not runtime-checkable: ``isinstance`` against such a protocol walks its members on every call
# (23-34 µs each on CPython 3.11, several per tool round); the two below read the one attribute
# that tells instead.


def batch_of(executor: ToolExecutor) -> ToolBatch | None:
    """The batch of a ``BatchedToolExecutor``, ``None`` for an executor that runs alone."""
    batch: ToolBatch | None = getattr(executor, "batch", None)
    return batch


def tool_name(call: GatewayCall, executor: ToolExecutor) -> str:
    """The tool's name for logs and hooks: a ``NamedTool``'s ``qualified_name``, else the
    upstream function name of the call."""
    name = getattr(executor, "qualified_name", None)
    return name if isinstance(name, str) else call.name


@dataclass(frozen=True, slots=True)
class PreludeItem:
    """An item the gateway produced before the first round (``mcp_list_tools``): sent as
    ``output_item.added`` with ``opening``, then ``events``, then ``output_item.done`` with
    ``item``."""

    opening: JsonObject
    events: tuple[str, ...]
    item: JsonObject


@dataclass(slots=True)
class PreparedTools:
    """The tools of one request, ready for the loop.

    ``executors`` maps the function names the upstream sees to gateway executors (names the
    gateway claims but cannot serve map to executors that answer with an error); every other
    function call belongs to the client. ``approved`` are calls the client approved in this
    request's input, run before the first round.
    """

    executors: Mapping[str, ToolExecutor]
    upstream_tools: list[JsonObject]
    tool_choice: Any
    upstream_input: list[JsonObject]
    prelude: list[PreludeItem]
    approved: list[tuple[GatewayCall, ToolExecutor]]

    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Citations for the answer: each gets the text of an output_text part once it is complete
    # and returns annotations (``url_citation``, ``file_citation``) for what the tools found.
    annotators: list[Callable[[str], list[JsonObject]]] = field(default_factory=list)
    # The ``include`` the upstream gets, when the toolkit changed the request's (a tool it left
    # out takes its ``include`` values with it); ``None``: the request's.
    upstream_include: list[Any] | None = None

    async def aclose(self) -> None:
        for closer in self.closers:
            await closer()


class ToolKit(Protocol):
    """Builds a request's tools: ownership, upstream function schemas, history lowering."""

    def involves_gateway(self, body: JsonObject, items: list[JsonObject]) -> bool:
        """Whether the request needs the tool loop (gateway tools, or gateway items to lower)."""
        ...

    async def prepare(
        self,
        body: JsonObject,
        history: list[JsonObject],
        new_input: list[JsonObject],
        context: ToolContext | None = None,
    ) -> PreparedTools:
        """Resolve the request's tools (listing MCP servers where needed) and lower
        ``history + new_input`` to what the upstream understands. Raises
        ``InvalidRequestError`` for a tool the request may not use."""
        ...

    @property
    def include_values(self) -> frozenset[str]:
        """The ``include`` values about the gateway's tool items: the gateway answers them, the
        upstream never sees them."""
        ...

    def secret_fields(self, tool_type: str) -> frozenset[str]:
        """The fields of a ``tool_type`` tool definition that go to the tool only: never
        stored, never echoed."""
        ...


# ----------------------------------------------------------------------------- providers


@dataclass(frozen=True, slots=True)
class ToolKindSpec:
    """What a tool kind declares, so that neither the kernel nor the protocol names it.

    ``namespace`` prefixes its upstream function names (``mcp__…``); ``tool_types`` are the
    request tool types it runs; ``items`` the item types it owns (lowered for the upstream),
    with the id prefix of those the gateway names (``app.main`` registers them with the
    protocol); ``include`` the ``include`` values about its items, which the gateway answers;
    ``secret_fields`` the fields of its tool definition that are never stored nor echoed.
    """

    namespace: str
    tool_types: frozenset[str]
    items: tuple[ItemKind, ...] = ()
    include: frozenset[str] = frozenset()
    secret_fields: frozenset[str] = frozenset()

    @property
    def item_types(self) -> frozenset[str]:
        return frozenset(kind.type for kind in self.items)


class ToolNames(Protocol):
    """Collision-free upstream function names for one request's gateway tools
    (``tools.toolkit.NameTable``)."""

    def claim(self, name: str) -> str:
        """``name`` itself when free (a built-in tool's plain name such as ``file_search``),
        else ``name`` with a numeric suffix; each call claims a new name."""
        ...

    def name(self, namespace: str, group: str, tool: str) -> str:
        """The one name of ``tool`` of ``group`` (an MCP server) in ``namespace``."""
        ...


@dataclass(slots=True)
class ProviderTools:
    """What a provider contributes to one request."""

    executors: dict[str, ToolExecutor] = field(default_factory=dict)
    upstream_tools: list[JsonObject] = field(default_factory=list)
    prelude: list[PreludeItem] = field(default_factory=list)
    approved: list[tuple[GatewayCall, ToolExecutor]] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    annotators: list[Callable[[str], list[JsonObject]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who a request's tools run for: the engine session (the conversation id, or the id of the
    first response of a ``previous_response_id`` chain), the response being made, whether
    the request is a dry run (``simulate``: every engine-run call is simulated), and the
    tenant it runs for (what the tools read and write is that tenant's: ``core.tenancy``)."""

    session_id: str
    response_id: str
    simulate: bool = False
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """What a provider is told about the request: its whole body (``include``,
    ``tool_choice`` …), the upstream names of this request's tools, and its ``ToolContext``."""

    body: JsonObject
    names: ToolNames
    context: ToolContext


class ToolProvider(Protocol):
    """The gateway side of one tool kind: turns its tools into ``function`` tools for the
    upstream (which only speaks function calling), returns one ``ToolExecutor`` per function
    name, and lowers its items in the history (``mcp_call`` …) back to ``function_call`` /
    ``function_call_output`` pairs."""

    spec: ToolKindSpec

    def unavailable(self) -> str | None:
        """Why this provider cannot run its tools on this gateway (e.g. no backend is
        configured), or ``None`` when it can."""
        ...

    async def prepare(
        self,
        tools: list[tuple[int, JsonObject]],
        history: list[JsonObject],
        new_input: list[JsonObject],
        request: ToolRequest,
    ) -> ProviderTools:
        """Resolve this provider's request tools (``(index in tools, tool)``)."""
        ...

    def lower(self, items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
        """``items`` with this provider's item types replaced by what the upstream reads."""
        ...

    def unknown_executor(self, name: str) -> ToolExecutor:
        """The executor for a name in this provider's namespace that no tool serves."""
        ...

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        """The upstream names a ``tool_choice`` entry of this provider's type selects."""
        ...
