"""Tool-set loaders: ``FileToolSet`` (a JSON or YAML list of tool specs) and ``OpenApiToolSet``
(an OpenAPI 3 document), what they make and how they refuse a bad file at load time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.engines import ToolSpec
from app.tools.engines.toolsets import FileToolSet, OpenApiToolSet
from tests.rest_servers.node import PETSTORE

GOOD: dict[str, Any] = {
    "name": "get_item",
    "description": "One item",
    "parameters": {
        "type": "object",
        "properties": {"id": {"type": "string"}, "full": {"type": "boolean"}},
        "required": ["id"],
    },
    "output_schema": {"type": "object"},
    "binding": {"method": "GET", "url": "https://api.example.com/items/{id}", "query": ["full"]},
}


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(content))
    else:
        path.write_text(yaml.safe_dump(content))
    return path


@pytest.mark.parametrize("name", ["tools.json", "tools.yaml"])
async def test_a_file_of_tool_specs(tmp_path: Path, name: str) -> None:
    bare = {"name": "ping"}
    toolset = FileToolSet(write(tmp_path, name, [GOOD, bare]), "crm")
    get_item, ping = await toolset.list_tools()
    assert get_item == ToolSpec(
        namespace="crm",
        name="get_item",
        description="One item",
        parameters=GOOD["parameters"],
        output_schema={"type": "object"},
        binding=GOOD["binding"],
    )
    assert (ping.qualified_name, ping.parameters, ping.binding) == (
        "crm::ping",
        {"type": "object", "properties": {}},
        None,
    )


def bad(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"tools": [GOOD]}, "must hold a list of tool specs"),
        ([bad(kind="x")], r"tools\[0\] \(get_item\)\.kind: Extra inputs are not permitted"),
        ([bad(name="has space")], r"tools\[0\] \(has space\)\.name: 'has space' is not 1-64"),
        ([bad(parameters={"type": "nope"})], r"\.parameters\.type: 'nope' is not valid"),
        ([bad(parameters={"type": "string"})], r"\.parameters: the parameters' schema must be"),
        ([bad(output_schema={"type": 3})], r"\.output_schema\.type: 3 is not valid"),
        ([bad(binding={"url": "/relative"})], r"\.binding\.url: Value error, '/relative' is not"),
        ([bad(binding={"url": "http://h/{nope}"})], r"\.binding\.url: 'nope' is not among"),
        ([bad(binding={**GOOD["binding"], "body": ["x"]})], r"\.binding\.body: 'x' is not among"),
        ([bad(binding={**GOOD["binding"], "auth": {"type": "oauth"}})], r"\.binding\.auth"),
        ([GOOD, GOOD], r"tools\[1\] \(get_item\)\.name: 'get_item' is used twice"),
        ([{"description": "x"}], r"tools\[0\]\.name: Field required"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_field(
    tmp_path: Path, content: Any, message: str
) -> None:
    path = write(tmp_path, "tools.yaml", content)
    with pytest.raises(ValueError, match=message) as caught:
        FileToolSet(path, "crm").load()
    assert str(caught.value).startswith(f"{path}: ")


def test_require_binding_and_unreadable_files(tmp_path: Path) -> None:
    path = write(tmp_path, "tools.json", [{"name": "ping"}])
    with pytest.raises(ValueError, match=r"tools\[0\] \(ping\)\.binding: missing"):
        FileToolSet(path, "crm", require_binding=True).load()
    with pytest.raises(ValueError, match=r"absent\.yaml: cannot be read"):
        FileToolSet(tmp_path / "absent.yaml", "crm").load()
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(ValueError, match=r"broken\.json: is not valid json"):
        FileToolSet(broken, "crm").load()
    with pytest.raises(ValueError, match="namespace 'a::b'"):
        FileToolSet(path, "a::b")


def petstore(**kwargs: Any) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in OpenApiToolSet(PETSTORE, "pets", **kwargs).load()}


def test_openapi_operations_become_tools() -> None:
    tools = petstore()
    assert sorted(tools) == [
        "createPet", "deletePet", "listPets", "placeOrder", "showPetById", "store_getInventory"
    ]  # fmt: skip
    listing = tools["listPets"]
    assert listing.namespace == "pets" and listing.description == "List pets"
    assert listing.parameters == {
        "type": "object",
        "properties": {
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "How many pets to return at most",
            }
        },
    }  # the header parameter is left out
    base = "https://petstore.example.com/v1"  # the first server, its variables at their defaults
    assert listing.binding == {"method": "GET", "url": f"{base}/pets", "query": ["limit"]}
    assert listing.output_schema is not None and listing.output_schema["type"] == "array"


def test_openapi_bodies_refs_and_output_schemas() -> None:
    tools = petstore()
    create = tools["createPet"]
    assert create.parameters["properties"] == {
        "name": {"type": "string"},
        "tag": {"type": ["string", "null"]},  # nullable
    }
    assert create.parameters["required"] == ["name"]
    assert create.binding is not None and create.binding["body"] == ["name", "tag"]
    show = tools["showPetById"]  # its parameter is a path-level $ref
    assert show.parameters["required"] == ["petId"]
    assert show.parameters["properties"]["petId"] == {
        "type": "integer",
        "description": "The pet's id",
    }
    assert show.output_schema is not None
    assert show.output_schema["properties"]["parent"] == {}  # Pet.parent is a Pet: the cycle
    order = tools["placeOrder"]  # an array body: the whole body under "body"
    assert order.parameters["properties"]["body"]["items"]["properties"]["petId"] == {
        "type": "integer"
    }
    assert order.binding is not None and order.binding["body_argument"] == "body"
    assert "required" not in order.parameters  # the body is optional


def test_openapi_selection_base_url_and_shared_binding(tmp_path: Path) -> None:
    tools = petstore(
        operations=["placeOrder"],
        tags=["pets"],
        base_url="http://127.0.0.1:9/api/",
        binding={"auth": {"type": "bearer", "token_env": "PETS_TOKEN"}, "timeout": 3},
    )
    assert sorted(tools) == ["createPet", "deletePet", "listPets", "placeOrder", "showPetById"]
    assert tools["showPetById"].binding == {
        "auth": {"type": "bearer", "token_env": "PETS_TOKEN"},
        "timeout": 3,
        "method": "GET",
        "url": "http://127.0.0.1:9/api/pets/{petId}",
        "query": [],
    }
    as_json = tmp_path / "petstore.json"
    as_json.write_text(json.dumps(yaml.safe_load(PETSTORE.read_text())))
    assert sorted(spec.name for spec in OpenApiToolSet(as_json, "p", tags=["store"]).load()) == [
        "placeOrder",
        "store_getInventory",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operations": ["adoptPet"]}, "operations: no operation has the operationId adoptPet"),
        ({"tags": ["vets"]}, "tags: no operation carries the tag vets"),
        ({"binding": {"url": "http://x/"}}, "binding: url cannot be shared"),
        (
            {"binding": {"auth": {"type": "bearer"}}},
            r"operation \w+: binding\.auth\.bearer\.token_env",
        ),
        ({"binding": {"timeout": -1}}, r"binding\.timeout: Input should be greater than 0"),
    ],
)
def test_openapi_selection_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        OpenApiToolSet(PETSTORE, "pets", **kwargs).load()
    assert str(caught.value).startswith(f"{PETSTORE}: ")


def document(**changes: Any) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {
            "/things/{id}": {
                "put": {
                    "operationId": "putThing",
                    "parameters": [{"name": "id", "in": "path", "required": True}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["id"],
                                    "properties": {"id": {"type": "string"}, "v": {}},
                                }
                            }
                        },
                    },
                }
            }
        },
        **changes,
    }


def test_a_body_clashing_with_a_parameter_goes_under_body(tmp_path: Path) -> None:
    [spec] = OpenApiToolSet(write(tmp_path, "api.yaml", document()), "t").load()
    assert sorted(spec.parameters["properties"]) == ["body", "id"]
    assert spec.parameters["required"] == ["id", "body"]
    assert spec.binding == {
        "method": "PUT",
        "url": "https://api.example.com/things/{id}",
        "query": [],
        "body_argument": "body",
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"openapi": "2.0"}, "openapi: not an OpenAPI 3 document"),
        ({"servers": [{"url": "/v1"}]}, r"servers\[0\]\.url: '/v1' is not an absolute"),
        ({"servers": []}, "servers: the document names no server: give base_url"),
        ({"paths": []}, "paths: missing or not an object"),
        (
            {"paths": {"/x/{id}": {"get": {"operationId": "x"}}}},
            r"paths\./x/\{id\}\.get: the path parameter 'id' is not declared",
        ),
        (
            {"paths": {"/x": {"get": {"parameters": [{"$ref": "other.yaml#/p"}]}}}},
            r"paths\./x\.get\.parameters\[0\]: \$ref 'other.yaml#/p' leaves the document",
        ),
        (
            {"paths": {"/x": {"get": {"parameters": [{"$ref": "#/components/nope"}]}}}},
            r"\$ref '#/components/nope' points at nothing",
        ),
    ],
)
def test_a_bad_document_is_refused(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    path = write(tmp_path, "api.yaml", document(**changes))
    with pytest.raises(ValueError, match=message) as caught:
        OpenApiToolSet(path, "t").load()
    assert str(caught.value).startswith(f"{path}: ")
