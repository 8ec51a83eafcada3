"""OpenAPI 3 documents as ``rest`` tools: ``tools_from_openapi`` makes one ``ToolSpec`` per
selected operation, with a ``RestBinding`` that calls it.

- Selection (``OpenApiSelection``): operations whose ``operationId`` is in ``operations`` or
  which carry one of ``tags``; neither given: every operation. A listed operationId or tag that
  the document lacks is an error.
- The tool's name is the operationId made safe (``[A-Za-z0-9_-]``, at most 64 characters;
  ``<method>_<path>`` when there is none). Its parameters are the path and query parameters
  (header and cookie parameters are left out: the binding's ``headers`` carry those) plus the
  JSON request body: an object body's properties flattened among them when no name clashes,
  else the whole body under ``body``. Its output schema is the first 2xx response's JSON schema.
- ``$ref``s within the document are inlined (a reference cycle becomes ``{}``, any value);
  OpenAPI 3.0's ``nullable`` becomes a JSON-schema ``null`` type. References to other
  documents are refused.
- The binding's URL is ``base_url`` (else the document's first server, its variables at their
  defaults) joined with the operation's path; ``binding`` adds the keys every tool shares
  (headers, secret headers, auth, TLS, timeout, size limit).

Every problem is a ``ValueError`` naming the field (``paths./pets/{id}.get.parameters[0]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.engines import ToolSpec
from app.protocol.json_types import JsonObject

METHODS = ("get", "put", "post", "delete", "patch", "head")
SHARED_BINDING_KEYS = frozenset(
    {"headers", "headers_from_env", "auth", "tls", "timeout", "max_response_bytes"}
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SERVER_VARIABLE = re.compile(r"\{([^{}]+)\}")
_PATH_PARAMETER = re.compile(r"\{([^{}/]+)\}")

Operation = tuple[str, str, JsonObject, list[Any]]
"""(path, method, operation, the path item's parameters)."""


@dataclass(frozen=True, slots=True)
class OpenApiSelection:
    """Which operations become tools, and what every tool's binding shares."""

    operations: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    base_url: str | None = None
    binding: Mapping[str, Any] | None = None


def safe_name(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_")[:64] or "operation"


def _is_json(media_type: str) -> bool:
    base = media_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


class _Document:
    """The document, with its local references resolved."""

    def __init__(self, doc: JsonObject) -> None:
        self.doc = doc

    def pointer(self, ref: str, where: str) -> Any:
        if not ref.startswith("#/"):
            raise ValueError(f"{where}: $ref {ref!r} leaves the document (only #/... refs)")
        node: Any = self.doc
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise ValueError(f"{where}: $ref {ref!r} points at nothing")
        return node

    def deref(self, node: Any, where: str) -> Any:
        """``node`` with a ``$ref`` at its top followed (chains too)."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise ValueError(f"{where}: $ref {ref!r} refers to itself")
            seen.add(ref)
            node = self.pointer(ref, where)
        return node

    def inline(self, schema: Any, where: str, stack: tuple[str, ...] = ()) -> Any:
        """A schema with every ``$ref`` replaced by what it points at."""
        if isinstance(schema, list):
            return [self.inline(item, where, stack) for item in schema]
        if not isinstance(schema, dict):
            return schema
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in stack:
                return {}
            return self.inline(self.pointer(ref, where), where, (*stack, ref))
        out = {key: self.inline(value, where, stack) for key, value in schema.items()}
        if out.pop("nullable", False) is True and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out


def _base_url(doc: JsonObject, selection: OpenApiSelection) -> str:
    if selection.base_url:
        return selection.base_url.rstrip("/")
    servers = doc.get("servers")
    server = servers[0] if isinstance(servers, list) and servers else None
    if not isinstance(server, dict) or not isinstance(server.get("url"), str):
        raise ValueError("servers: the document names no server: give base_url")
    variables = server.get("variables") if isinstance(server.get("variables"), dict) else {}

    def default(match: re.Match[str]) -> str:
        variable = variables.get(match.group(1)) if variables else None
        if not isinstance(variable, dict) or "default" not in variable:
            raise ValueError(f"servers[0].variables.{match.group(1)}: no default value")
        return str(variable["default"])

    url = _SERVER_VARIABLE.sub(default, server["url"]).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"servers[0].url: {url!r} is not an absolute http(s) URL: give base_url")
    return url


def _operations(doc: _Document) -> Iterator[Operation]:
    """(path, method, operation, path-level parameters) of every operation."""
    paths = doc.doc.get("paths")
    if not isinstance(paths, dict):
        raise ValueError("paths: missing or not an object")
    for path, raw_item in paths.items():
        item = doc.deref(raw_item, f"paths.{path}")
        if not isinstance(item, dict):
            raise ValueError(f"paths.{path}: not an object")
        common = item.get("parameters") or []
        for method in METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                yield path, method, operation, common if isinstance(common, list) else []


def _json_schema(doc: _Document, content: Any, where: str) -> Any | None:
    if not isinstance(content, dict):
        return None
    for media_type, media in content.items():
        if _is_json(media_type) and isinstance(media, dict) and "schema" in media:
            return doc.inline(media["schema"], f"{where}.content.{media_type}.schema")
    return None


@dataclass
class _Tool:
    """One operation's parameters and binding, as they are built."""

    properties: JsonObject
    required: list[str]
    binding: JsonObject

    def add(self, name: str, schema: Any, where: str) -> None:
        if name in self.properties:
            raise ValueError(f"{where}: the parameter name {name!r} is used twice")
        self.properties[name] = schema if isinstance(schema, dict) else {}


def _add_parameters(doc: _Document, tool: _Tool, raw: list[Any], where: str) -> None:
    merged: dict[tuple[str, str], JsonObject] = {}
    for index, entry in enumerate(raw):
        parameter = doc.deref(entry, f"{where}[{index}]")
        if not isinstance(parameter, dict) or not isinstance(parameter.get("name"), str):
            raise ValueError(f"{where}[{index}]: a parameter needs a name")
        merged[(parameter["name"], str(parameter.get("in")))] = parameter
    query: list[str] = []
    for (name, location), parameter in merged.items():
        if location not in ("path", "query"):
            continue
        at = f"{where}.{name}"
        schema = doc.inline(parameter.get("schema"), at) or _json_schema(
            doc, parameter.get("content"), at
        )
        schema = dict(schema) if isinstance(schema, dict) else {}
        if isinstance(parameter.get("description"), str):
            schema.setdefault("description", parameter["description"])
        tool.add(name, schema, at)
        if location == "path" or parameter.get("required") is True:
            tool.required.append(name)
        if location == "query":
            query.append(name)
    tool.binding["query"] = query


def _add_body(doc: _Document, tool: _Tool, raw: Any, where: str) -> None:
    body = doc.deref(raw, where)
    if not isinstance(body, dict):
        return
    schema = _json_schema(doc, body.get("content"), where)
    required = body.get("required") is True
    if not isinstance(schema, dict):
        if required:
            raise ValueError(f"{where}: a required body that is not application/json")
        return
    members = schema.get("properties")
    flat = (
        isinstance(members, dict)
        and members
        and schema.get("type", "object") == "object"
        and not any(key in schema for key in ("allOf", "anyOf", "oneOf"))
        and not set(members) & set(tool.properties)
    )
    if flat and isinstance(members, dict):
        for name, member in members.items():
            tool.add(name, member, where)
        wanted = schema.get("required")
        if required and isinstance(wanted, list):
            tool.required.extend(str(name) for name in wanted)
        tool.binding["body"] = list(members)
    else:
        tool.add("body", schema, where)
        if required:
            tool.required.append("body")
        tool.binding["body_argument"] = "body"


def _output_schema(doc: _Document, responses: Any, where: str) -> JsonObject | None:
    if not isinstance(responses, dict):
        return None
    entries = sorted(
        (str(code), response)
        for code, response in responses.items()
        if str(code).upper().startswith("2")
    )
    for code, raw in entries:  # "200" < "201" < "2XX"
        response = doc.deref(raw, f"{where}.{code}")
        if isinstance(response, dict):
            schema = _json_schema(doc, response.get("content"), f"{where}.{code}")
            if isinstance(schema, dict):
                return schema
    return None


def _description(operation: JsonObject) -> str:
    parts = [operation.get("summary"), operation.get("description")]
    return "\n\n".join(part.strip() for part in parts if isinstance(part, str) and part.strip())


def _selected(operation_id: str, tags: Any, selection: OpenApiSelection) -> bool:
    if selection.operations is None and selection.tags is None:
        return True
    if selection.operations is not None and operation_id in selection.operations:
        return True
    return bool(selection.tags and isinstance(tags, list) and set(tags) & set(selection.tags))


def _check_selection(
    found_ids: set[str], found_tags: set[str], selection: OpenApiSelection
) -> None:
    missing = [name for name in selection.operations or () if name not in found_ids]
    if missing:
        raise ValueError(f"operations: no operation has the operationId {', '.join(missing)}")
    missing = [tag for tag in selection.tags or () if tag not in found_tags]
    if missing:
        raise ValueError(f"tags: no operation carries the tag {', '.join(missing)}")


def _tool_spec(
    doc: _Document, namespace: str, found: Operation, base_url: str, shared: JsonObject
) -> ToolSpec:
    path, method, operation, common = found
    where = f"paths.{path}.{method}"
    binding: JsonObject = {**shared, "method": method.upper(), "url": base_url + path}
    tool = _Tool(properties={}, required=[], binding=binding)
    raw_parameters = [*common, *(operation.get("parameters") or [])]
    _add_parameters(doc, tool, raw_parameters, f"{where}.parameters")
    for name in _PATH_PARAMETER.findall(path):
        if name not in tool.properties:
            raise ValueError(f"{where}: the path parameter {name!r} is not declared")
    _add_body(doc, tool, operation.get("requestBody"), f"{where}.requestBody")
    parameters: JsonObject = {"type": "object", "properties": tool.properties}
    if tool.required:
        parameters["required"] = list(dict.fromkeys(tool.required))
    return ToolSpec(
        namespace=namespace,
        name=safe_name(str(operation.get("operationId") or f"{method}_{path}")),
        description=_description(operation),
        parameters=parameters,
        output_schema=_output_schema(doc, operation.get("responses"), f"{where}.responses"),
        binding=binding,
    )


def tools_from_openapi(
    document: Any, namespace: str, selection: OpenApiSelection | None = None
) -> list[ToolSpec]:
    """The tools of the selected operations (see the module docstring); ``ValueError`` else."""
    selection = selection or OpenApiSelection()
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3."):
        raise ValueError("openapi: not an OpenAPI 3 document (its 'openapi' is not 3.x)")
    shared = dict(selection.binding or {})
    unknown = sorted(set(shared) - SHARED_BINDING_KEYS)
    if unknown:
        raise ValueError(f"binding: {', '.join(unknown)} cannot be shared by every operation")
    doc = _Document(document)
    base_url = _base_url(document, selection)
    tools: dict[str, ToolSpec] = {}
    found_ids: set[str] = set()
    found_tags: set[str] = set()
    for path, method, operation, common in _operations(doc):
        operation_id = str(operation.get("operationId") or f"{method}_{path}")
        tags = [str(tag) for tag in operation.get("tags") or []]
        found_ids.add(operation_id)
        found_tags.update(tags)
        if not _selected(operation_id, tags, selection):
            continue
        where = f"paths.{path}.{method}"
        spec = _tool_spec(doc, namespace, (path, method, operation, common), base_url, shared)
        if spec.name in tools:
            raise ValueError(f"{where}: two operations are both named {spec.name!r} once made safe")
        tools[spec.name] = spec
    _check_selection(found_ids, found_tags, selection)
    return list(tools.values())
