"""The README's worked example of a third-party engine ("Writing an engine") works as written:
its Python module, installed with its entry points the way pip leaves a package, is found by
the registry, configured as the README's TOML shows, and answers a call through the gateway;
its hook sees the call."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app.main import create_app
from app.settings import Settings
from tests.e2e.engine_upstream import EngineUpstream, call, message, tool_outputs
from tests.helpers import in_process, openai_client, serve_in_thread
from tests.plugin_dists import Site, installed_site

README = Path(__file__).resolve().parents[2] / "README.md"


def example_blocks() -> tuple[str, str, str]:
    """The section's pyproject, Python module and respgate.toml blocks."""
    text = README.read_text()
    section = text[text.index("**Writing an engine.**") : text.index("**Limits.**")]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    tomls = [body for lang, body in blocks if lang == "toml"]
    python = [body for lang, body in blocks if lang == "python"]
    assert len(tomls) == 2 and len(python) == 1
    return tomls[0], python[0], tomls[1]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from installed_site(tmp_path, monkeypatch)


def test_the_readme_engine_package_runs_through_the_gateway(
    site: Site,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pyproject, source, config = example_blocks()
    module = site.module_name("inventory_engine")
    entry_points = tomllib.loads(pyproject)["project"]["entry-points"]
    site.install(
        "respgate-inventory",
        {module: source},
        {
            group: {name: value.replace("inventory_engine", module) for name, value in e.items()}
            for group, e in entry_points.items()
        },
    )
    settings_toml = tomllib.loads(config)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INVENTORY_TOKEN", "secret-token")
    tools = [
        {
            "name": "lookup",
            "description": "Stock of a SKU",
            "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
        }
    ]
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "stock.yaml").write_text(yaml.safe_dump(tools))

    def script(body: dict[str, object]) -> list[dict[str, object]]:
        if not tool_outputs(body):
            return [call("mcp__stock__lookup", {"sku": "A1"}, "s1")]
        return [message("12 in stock")]

    upstream = EngineUpstream(script=script)
    with serve_in_thread(upstream.app()) as url:
        settings = Settings(upstream_url=url, **settings_toml)
        with in_process(create_app(settings)) as http:
            response = openai_client(http).responses.create(
                model=upstream.model,
                input="How many A1?",
                tools=[{"type": "mcp", "server_label": "stock"}],
            )
    (item,) = [i for i in response.output if i.type == "mcp_call"]
    assert item.server_label == "stock" and item.error is None
    assert json.loads(item.output or "{}") == {"sku": "A1", "stock": 12}
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert [e["type"] for e in printed if e.get("tool") == "stock::lookup"] == [
        "tool_call.started",
        "tool_call.completed",
    ]
