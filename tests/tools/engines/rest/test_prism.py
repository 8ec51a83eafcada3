"""An OpenAPI document (tests/rest_servers/petstore.yaml) served by Prism (npm), a mock server
that validates requests against it: its operations, loaded by ``OpenApiToolSet``, work through
the ``rest`` engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import orjson
import pytest

from app.core.engines import ToolSpec
from app.tools.engines.rest import RestEngine
from app.tools.engines.toolsets import OpenApiToolSet
from tests.rest_servers.node import PETSTORE, NodeUnavailableError, ensure_prism, serve_prism
from tests.tools.engines.rest.helpers import call


@pytest.fixture(scope="module")
def prism() -> Iterator[str]:
    try:
        ensure_prism()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    with serve_prism(PETSTORE) as url:
        yield url


@pytest.fixture
async def engine() -> AsyncIterator[RestEngine]:
    engine = RestEngine(environ={})
    await engine.setup("s")
    yield engine
    await engine.aclose()


def pets_tools(prism: str, **kwargs: object) -> dict[str, ToolSpec]:
    toolset = OpenApiToolSet(PETSTORE, "pets", base_url=prism, **kwargs)  # type: ignore[arg-type]
    return {spec.name: spec for spec in toolset.load()}


async def test_the_pets_operations_work_through_the_engine(engine: RestEngine, prism: str) -> None:
    tools = pets_tools(prism, tags=["pets"])
    assert sorted(tools) == ["createPet", "deletePet", "listPets", "showPetById"]
    results = await engine.execute(
        "s",
        [
            call(tools["listPets"], {"limit": 2}, "c1"),
            call(tools["createPet"], {"name": "Nemo", "tag": "fish"}, "c2"),
            call(tools["showPetById"], {"petId": 1}, "c3"),
            call(tools["deletePet"], {"petId": 1}, "c4"),
        ],
    )
    assert [r.error for r in results] == [None] * 4
    assert orjson.loads(results[0].output) == [
        {"id": 1, "name": "Rex", "tag": "dog"},
        {"id": 2, "name": "Tom", "tag": "cat"},
    ]
    assert orjson.loads(results[1].output) == {"id": 3, "name": "Nemo", "tag": "fish"}
    assert orjson.loads(results[2].output)["name"] == "Rex"
    assert results[3].output == ""  # 204


async def test_prism_refuses_what_the_document_refuses(engine: RestEngine, prism: str) -> None:
    tools = pets_tools(prism, operations=["listPets"])
    spec = tools["listPets"]
    # the engine checks the tool's parameters first; Prism checks the request against the document
    [local] = await engine.execute("s", [call(spec, {"limit": 0})])
    assert local.error is not None and local.error.kind == "invalid_arguments"
    lenient = ToolSpec(namespace="pets", name="listPets", binding=spec.binding)
    [remote] = await engine.execute("s", [call(lenient, {"limit": 0})])
    assert remote.error is not None and remote.error.kind == "http_status"
    assert remote.error.message.startswith("HTTP 422")


async def test_a_documented_404_and_a_whole_body_argument(engine: RestEngine, prism: str) -> None:
    not_found = pets_tools(
        prism, operations=["showPetById"], binding={"headers": {"Prefer": "code=404"}}
    )
    [missing] = await engine.execute("s", [call(not_found["showPetById"], {"petId": 9})])
    assert missing.error is not None and missing.error.kind == "http_status"
    assert "no such pet" in missing.error.message
    orders = pets_tools(prism, tags=["store"])
    assert sorted(orders) == ["placeOrder", "store_getInventory"]
    [placed] = await engine.execute(
        "s", [call(orders["placeOrder"], {"body": [{"petId": 1, "quantity": 2}]})]
    )
    assert placed.output == '{"placed":1}'
