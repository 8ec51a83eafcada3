"""Tool-set loaders (``core.engines.ToolSet``): where a namespace's tools come from.

- ``FileToolSet``: a JSON or YAML file holding a list of tool specs, each ``name``,
  ``description``, ``parameters`` (a JSON schema of type object), optional ``output_schema``,
  optional ``binding`` (a ``rest.binding.RestBinding``; required with ``require_binding``) and
  optional ``annotations``; unknown keys refused.
- ``OpenApiToolSet``: an OpenAPI 3 document (JSON or YAML), one tool per selected operation
  (``rest.openapi.tools_from_openapi``).

Both read and validate their file at load time (``load()``, which ``list_tools`` calls once and
then keeps): names, JSON schemas (``jsonschema``'s meta-schema check), bindings and the
arguments they name. Every problem is a ``ValueError`` naming the file and the field
(``tools.yaml: tools[2] (get_pet).binding.url: ...``). The namespace is the loader's argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.engines import QUALIFIER, ToolSpec
from app.protocol.json_types import JsonObject
from app.tools.engines.rest.binding import RestBinding
from app.tools.engines.rest.engine import describe_errors
from app.tools.engines.rest.openapi import OpenApiSelection, tools_from_openapi

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def read_document(path: Path) -> Any:
    """A JSON (``.json``) or YAML file's content; ``ValueError`` naming the file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            return orjson.loads(raw)
        return yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(
            f"{path}: is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}"
        ) from None


def check_schema(schema: Any, field: str, *, object_type: bool) -> None:
    """``ValueError`` when ``schema`` is not a JSON schema (of type object if asked)."""
    if not isinstance(schema, dict):
        raise ValueError(f"{field}: a JSON schema must be an object")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        raise ValueError(f"{field}{'.' + where if where else ''}: {exc.message}") from None
    if object_type and schema.get("type", "object") != "object":
        raise ValueError(f"{field}: the parameters' schema must be of type object")


def check_tool(spec: ToolSpec, *, require_binding: bool) -> None:
    """``ValueError`` (field relative to the tool) when ``spec`` cannot be served."""
    if not TOOL_NAME.match(spec.name):
        raise ValueError(f"name: {spec.name!r} is not 1-64 of A-Z a-z 0-9 _ -")
    check_schema(spec.parameters, "parameters", object_type=True)
    if spec.output_schema is not None:
        check_schema(spec.output_schema, "output_schema", object_type=False)
    if spec.binding is None:
        if require_binding:
            raise ValueError("binding: missing (the rest engine needs one)")
        return
    try:
        binding = RestBinding.model_validate(dict(spec.binding))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise ValueError(f"binding.{describe_errors(errors)}") from None
    problems = binding.problems_with(spec.parameters)
    if problems:
        raise ValueError(f"binding.{problems[0]}")


def _check_namespace(namespace: str) -> str:
    if not namespace or QUALIFIER in namespace:
        raise ValueError(f"namespace {namespace!r}: must be non-empty, without {QUALIFIER!r}")
    return namespace


class _FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    parameters: JsonObject = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: JsonObject | None = None
    binding: JsonObject | None = None
    annotations: JsonObject | None = None


class FileToolSet:
    """The tools of a JSON or YAML file (see the module docstring)."""

    def __init__(self, path: str | Path, namespace: str, *, require_binding: bool = False) -> None:
        self.path = Path(path)
        self.namespace = _check_namespace(namespace)
        self.require_binding = require_binding
        self._tools: list[ToolSpec] | None = None

    def load(self) -> list[ToolSpec]:
        """Read and validate the file (once): ``ValueError`` naming the file and field."""
        if self._tools is None:
            self._tools = self._read()
        return list(self._tools)

    async def list_tools(self) -> list[ToolSpec]:
        return self.load()

    def _read(self) -> list[ToolSpec]:
        entries = read_document(self.path)
        if not isinstance(entries, list):
            raise ValueError(f"{self.path}: must hold a list of tool specs")
        tools: dict[str, ToolSpec] = {}
        for index, entry in enumerate(entries):
            label = f"tools[{index}]"
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                label += f" ({entry['name']})"
            try:
                spec = self._spec(entry)
                check_tool(spec, require_binding=self.require_binding)
            except ValueError as exc:
                raise ValueError(f"{self.path}: {label}.{exc}") from None
            if spec.name in tools:
                raise ValueError(f"{self.path}: {label}.name: {spec.name!r} is used twice")
            tools[spec.name] = spec
        return list(tools.values())

    def _spec(self, entry: Any) -> ToolSpec:
        try:
            parsed = _FileEntry.model_validate(entry)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            raise ValueError(describe_errors(errors)) from None
        return ToolSpec(
            namespace=self.namespace,
            name=parsed.name,
            description=parsed.description,
            parameters=parsed.parameters,
            output_schema=parsed.output_schema,
            binding=parsed.binding,
            annotations=parsed.annotations,
        )


class OpenApiToolSet:
    """The operations of an OpenAPI 3 document as tools (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        namespace: str,
        *,
        operations: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        base_url: str | None = None,
        binding: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.namespace = _check_namespace(namespace)
        self.selection = OpenApiSelection(
            operations=tuple(operations) if operations is not None else None,
            tags=tuple(tags) if tags is not None else None,
            base_url=base_url,
            binding=binding,
        )
        self._tools: list[ToolSpec] | None = None

    def load(self) -> list[ToolSpec]:
        """Read and convert the document (once): ``ValueError`` naming the file and field."""
        if self._tools is None:
            document = read_document(self.path)
            try:
                tools = tools_from_openapi(document, self.namespace, self.selection)
            except ValueError as exc:
                raise ValueError(f"{self.path}: {exc}") from None
            for spec in tools:
                try:
                    check_tool(spec, require_binding=True)
                except ValueError as exc:
                    raise ValueError(f"{self.path}: operation {spec.name}: {exc}") from None
            self._tools = tools
        return list(self._tools)

    async def list_tools(self) -> list[ToolSpec]:
        return self.load()
