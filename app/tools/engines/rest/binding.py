"""``RestBinding``: how the ``rest`` engine calls one tool, and how a call's arguments become a
request (``build_request``).

A binding is a mapping on the tool's spec (``ToolSpec.binding``), validated here with pydantic
(unknown keys refused) by the engine and, earlier, by the tool-set loaders:

- ``method`` and ``url``: an absolute http(s) URL template whose ``{name}`` placeholders are
  path parameters, filled with the argument's value URL-encoded (``quote(safe="")``); a value
  that is empty, ``.`` or ``..`` is refused, so a call cannot climb the URL's path.
- ``query`` / ``body``: the arguments sent in the query string / as members of a JSON object
  body; ``body_argument``: one argument whose value is the whole JSON body (an OpenAPI body that
  is not an object, or whose members clash with a parameter's name). Every other argument goes
  to the query for GET, DELETE and HEAD, else to the JSON body (to the query when
  ``body_argument`` is set).
- ``headers`` (static), ``headers_from_env`` (header -> environment variable: secrets),
  ``auth`` (``bearer`` with ``token_env``, ``api_key`` with ``header`` and ``key_env``,
  ``basic`` with ``username`` and ``password_env``): secrets are read from the environment on
  each call and live only in the request's headers, never in the spec, a history or a message.
  A call made for a client's request sends its id as ``X-Request-Id`` (unless ``headers`` sets
  one; ``core.request_id``).
- ``tls``: ``ca_bundle`` (the CAs trusted instead of the default ones), ``client_cert`` and
  ``client_key`` (a client certificate), ``verify`` (on by default).
- ``timeout`` (seconds) and ``max_response_bytes``: None takes the engine's defaults.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.core.request_id import current_request_id
from app.protocol.json_types import JsonObject

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
QUERY_METHODS = frozenset({"GET", "DELETE", "HEAD"})
PLACEHOLDER = re.compile(r"\{([^{}/]+)\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


def _header_name(value: str) -> str:
    if not _HEADER_NAME.match(value):
        raise ValueError(f"{value!r} is not an HTTP header name")
    return value


class BearerAuth(_Strict):
    type: Literal["bearer"]
    token_env: str

    _check = field_validator("token_env")(_env_name)


class ApiKeyAuth(_Strict):
    type: Literal["api_key"]
    header: str = "X-API-Key"
    key_env: str

    _check_env = field_validator("key_env")(_env_name)
    _check_header = field_validator("header")(_header_name)


class BasicAuth(_Strict):
    type: Literal["basic"]
    username: str
    password_env: str

    _check = field_validator("password_env")(_env_name)


Auth = Annotated[BearerAuth | ApiKeyAuth | BasicAuth, Field(discriminator="type")]


class TlsSettings(_Strict):
    """How the engine checks the server (and shows itself): one aiohttp session per setting."""

    ca_bundle: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    verify: bool = True

    @model_validator(mode="after")
    def _key_needs_cert(self) -> TlsSettings:
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert")
        return self


class RestBinding(_Strict):
    """How the ``rest`` engine calls one tool (see the module docstring)."""

    method: Method = "GET"
    url: str
    query: tuple[str, ...] | None = None
    body: tuple[str, ...] | None = None
    body_argument: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    auth: Auth | None = None
    tls: TlsSettings = Field(default_factory=TlsSettings)
    timeout: float | None = Field(default=None, gt=0)
    max_response_bytes: int | None = Field(default=None, gt=0)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _absolute(cls, value: str) -> str:
        parts = urlsplit(PLACEHOLDER.sub("x", value))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{value!r} is not an absolute http(s) URL")
        if "{" in urlsplit(value).netloc:
            raise ValueError("the URL's host cannot hold a path parameter")
        parts.port  # noqa: B018 - raises ValueError for a port out of range
        return value

    @field_validator("headers", "headers_from_env")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _header_name(name)
        return value

    @field_validator("headers_from_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value.values():
            _env_name(name)
        return value

    @property
    def path_parameters(self) -> tuple[str, ...]:
        return tuple(PLACEHOLDER.findall(self.url))

    def problems_with(self, parameters: JsonObject) -> list[str]:
        """What in this binding names an argument the tool's parameters do not declare."""
        properties = parameters.get("properties")
        declared = set(properties) if isinstance(properties, dict) else set()
        named = {
            "url": self.path_parameters,
            "query": self.query or (),
            "body": self.body or (),
            "body_argument": (self.body_argument,) if self.body_argument else (),
        }
        return [
            f"{field}: {name!r} is not among the tool's parameters"
            for field, names in named.items()
            for name in names
            if name not in declared
        ]


class ArgumentError(ValueError):
    """The arguments cannot make a request (a path parameter missing or refused)."""


class MissingSecretError(LookupError):
    """An environment variable the binding reads a secret from is not set."""


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request, ready for aiohttp; ``secrets`` are the header values to hide."""

    method: str
    url: str
    params: list[tuple[str, str]]
    json_body: bytes | None
    headers: dict[str, str]
    secrets: tuple[str, ...]


def _path_value(name: str, value: Any) -> str:
    if value is None or isinstance(value, dict | list):
        raise ArgumentError(f"the path parameter {name!r} must be a string or a number")
    text = _scalar(value)
    if text in ("", ".", ".."):
        raise ArgumentError(f"the path parameter {name!r} cannot be {text!r}")
    return quote(text, safe="")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def _query_pairs(name: str, value: Any) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, list):
        return [(name, _scalar(item)) for item in value if item is not None]
    return [(name, _scalar(value))]


def _secret_headers(
    binding: RestBinding, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The headers that carry secrets, and the secrets (to hide wherever text is shown)."""
    secrets: list[str] = []

    def secret(env: str) -> str:
        value = environ.get(env)
        if not value:
            raise MissingSecretError(f"the environment variable {env} is not set")
        secrets.append(value)
        return value

    headers = {header: secret(env) for header, env in binding.headers_from_env.items()}
    auth = binding.auth
    if isinstance(auth, BearerAuth):
        headers["Authorization"] = f"Bearer {secret(auth.token_env)}"
    elif isinstance(auth, ApiKeyAuth):
        headers[auth.header] = secret(auth.key_env)
    elif isinstance(auth, BasicAuth):
        pair = f"{auth.username}:{secret(auth.password_env)}".encode()
        headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    return headers, [*secrets, *headers.values()]


def build_request(
    binding: RestBinding, arguments: JsonObject, environ: Mapping[str, str]
) -> Request:
    """The request a call with ``arguments`` makes (``ArgumentError``, ``MissingSecretError``)."""
    path_names = binding.path_parameters
    url = binding.url
    for name in path_names:
        if name not in arguments:
            raise ArgumentError(f"the path parameter {name!r} is missing")
        url = url.replace("{" + name + "}", _path_value(name, arguments[name]))
    in_query = set(binding.query or ())
    in_body = set(binding.body or ())
    rest_to_query = binding.method in QUERY_METHODS or binding.body_argument is not None
    params: list[tuple[str, str]] = []
    body: JsonObject = {}
    for name, value in arguments.items():
        if name in path_names or name == binding.body_argument:
            continue
        if name in in_query or (name not in in_body and rest_to_query):
            params.extend(_query_pairs(name, value))
        else:
            body[name] = value
    json_body: bytes | None = None
    if binding.body_argument is not None and binding.body_argument in arguments:
        json_body = orjson.dumps(arguments[binding.body_argument])
    elif body or (binding.method not in QUERY_METHODS and binding.body_argument is None):
        json_body = orjson.dumps(body)
    secret_headers, secrets = _secret_headers(binding, environ)
    headers = {**binding.headers, **secret_headers}
    if json_body is not None:
        headers.setdefault("Content-Type", "application/json")
    headers.setdefault("Accept", "application/json")
    request_id = current_request_id()  # the client's request this call serves
    if request_id is not None:
        headers.setdefault("X-Request-Id", request_id)
    return Request(
        method=binding.method,
        url=url,
        params=params,
        json_body=json_body,
        headers=headers,
        secrets=tuple(sorted(set(secrets), key=len, reverse=True)),
    )
