"""The tool settings: configured MCP servers (``[mcp]``), tool engines (``[tool_engines.*]``)
and tool sets (``[[tool_sets]]``). ``app.settings`` puts them into ``Settings``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.tools.mcp.spec import McpServerSpec, transport_for_url


class McpServerConfig(BaseModel):
    """One MCP server the operator configures (``[[mcp.servers]]``); its tools are trusted."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    url: str | None = None
    command: list[str] | None = None
    transport: Literal["streamable_http", "sse"] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    allowed_tools: list[str] | None = None
    require_approval: Literal["always", "never"] | dict[str, Any] = "never"
    description: str | None = None

    @model_validator(mode="after")
    def _one_endpoint(self) -> Self:
        if (self.url is None) == (self.command is None):
            raise ValueError(
                f"MCP server {self.label!r}: set exactly one of url (HTTP) and command (stdio)"
            )
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"MCP server {self.label!r}: url must be an http(s) URL")
        if self.command is not None:
            if not self.command or not self.command[0]:
                raise ValueError(f"MCP server {self.label!r}: command must name a program")
            if self.transport is not None:
                raise ValueError(
                    f"MCP server {self.label!r}: transport applies to url servers only"
                )
        return self

    def to_spec(self, environ: Mapping[str, str]) -> McpServerSpec:
        """The client spec, with ``headers_from_env`` resolved from ``environ``.

        Raises ValueError naming the environment variable that is not set.
        """
        headers = dict(self.headers)
        for header, variable in self.headers_from_env.items():
            value = environ.get(variable)
            if value is None:
                raise ValueError(
                    f"MCP server {self.label!r}: header {header} comes from the environment "
                    f"variable {variable}, which is not set"
                )
            headers[header] = value
        if self.command is not None:
            return McpServerSpec(
                label=self.label,
                transport="stdio",
                command=tuple(self.command),
                env=dict(self.env),
                headers=headers,
            )
        assert self.url is not None  # validated: exactly one of url and command
        return McpServerSpec(
            label=self.label,
            url=self.url,
            transport=self.transport or transport_for_url(self.url),
            env=dict(self.env),
            headers=headers,
        )


# Keys of [mcp] that the one egress policy ([egress], app/options/egress.py) replaced: naming one
# stops start-up with what to write instead.
_MOVED_TO_EGRESS = {
    "allowed_hosts": (
        "[mcp] allowed_hosts was removed: every outbound connection now follows [egress]. "
        "Public addresses are allowed by default; put MCP hosts on private addresses in "
        "[egress] allow_hosts (set [egress] allow_public = false to allow only the listed "
        "hosts). See README.md, 'Egress'."
    ),
    "allow_link_local": (
        "[mcp] allow_link_local was removed: every outbound connection now follows [egress]. "
        "List the link-local range in [egress] allow_networks (e.g. '169.254.0.0/16') to allow "
        "it; cloud metadata addresses stay refused. See README.md, 'Egress'."
    ),
}


class McpSettings(BaseModel):
    """MCP client settings (``[mcp]``)."""

    model_config = ConfigDict(extra="forbid")

    connect_timeout: float = Field(default=10.0, gt=0)
    servers: list[McpServerConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key, advice in _MOVED_TO_EGRESS.items():
                if key in data:
                    raise ValueError(advice)
        return data

    @model_validator(mode="after")
    def _unique_labels(self) -> Self:
        seen: set[str] = set()
        for server in self.servers:
            if server.label in seen:
                raise ValueError(f"MCP server label {server.label!r} is used more than once")
            seen.add(server.label)
        return self


NAMESPACE_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class ToolEngineConfig(BaseModel):
    """One tool engine (``[tool_engines.<name>]``): its ``kind`` (``rest``, ``lm``, ``mcp``, or
    a third-party kind from the ``respgate.tool_engines`` entry point group) and the kind's own
    options, which the kind's factory checks."""

    model_config = ConfigDict(extra="allow")

    kind: str

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ToolSetConfig(BaseModel):
    """One tool set (``[[tool_sets]]``): where its tools come from (exactly one of ``file``,
    ``openapi``, ``mcp_server``), the namespace clients select it by, the engine that runs it,
    and the operator's terms (a request may narrow them, never widen them)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    engine: str
    file: Path | None = None
    openapi: Path | None = None
    operations: list[str] | None = None
    tags: list[str] | None = None
    base_url: str | None = None
    mcp_server: str | None = None
    mode: Literal["execute", "simulate"] = "execute"
    allowed_tools: list[str] | None = None
    require_approval: Literal["always", "never"] | dict[str, Any] = "never"
    description: str | None = None

    def relative_to(self, base: Path) -> ToolSetConfig:
        """This tool set with its relative ``file`` or ``openapi`` path taken from ``base``."""
        update = {
            key: base / path
            for key, path in (("file", self.file), ("openapi", self.openapi))
            if path is not None and not path.expanduser().is_absolute()
        }
        return self.model_copy(update=update) if update else self

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        sources = [s for s in (self.file, self.openapi, self.mcp_server) if s is not None]
        if len(sources) != 1:
            raise ValueError(
                f"tool set {self.namespace!r}: set exactly one of file, openapi and mcp_server"
            )
        if self.openapi is None and (self.operations or self.tags or self.base_url):
            raise ValueError(
                f"tool set {self.namespace!r}: operations, tags and base_url apply to openapi"
            )
        return self
