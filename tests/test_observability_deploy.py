"""``docker compose --profile observability``: Prometheus and Grafana beside the gateway, checked
without a Docker engine: the profile's services, Prometheus's scrape of the gateway with the
metrics token the gateway checks, Grafana's provisioned data source and dashboard. (That every
metric the dashboard queries is exported: tests/api/test_metrics.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
PROFILE = "observability"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def services() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = load(COMPOSE)["services"]
    return loaded


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Each bind-mounted path of the repository (``./...``), by its target in the container."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *_ = str(volume).split(":")
        if source.startswith("./"):
            found[target] = source
    return found


def test_prometheus_and_grafana_start_only_with_the_profile() -> None:
    found = services()
    optional = {name for name, s in found.items() if PROFILE in s.get("profiles", [])}
    assert optional == {"prometheus", "grafana"}
    for name, service in found.items():
        if name not in optional:
            assert "profiles" not in service, f"{name} would not start with `docker compose up`"
    for name in optional:
        for dependency in found[name].get("depends_on", {}):
            assert dependency in found


def test_prometheus_scrapes_the_gateway_with_the_token_it_checks() -> None:
    found = services()
    prometheus, gateway = found["prometheus"], found["respgate"]
    config_path = ROOT / mounts(prometheus)["/etc/prometheus/prometheus.yml"]
    config = load(config_path)
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    port = Settings().port
    assert job["static_configs"] == [{"targets": [f"respgate:{port}"]}]
    token_file = job["authorization"]["credentials_file"]
    secret = token_file.removeprefix("/run/secrets/")
    assert secret in prometheus["secrets"]
    # The gateway checks the same secret: RESPGATE_METRICS__TOKEN_FILE (the [metrics] token).
    assert gateway["environment"]["RESPGATE_METRICS__TOKEN_FILE"] == token_file
    assert secret in gateway["secrets"]
    assert any(
        str(flag).endswith("/etc/prometheus/prometheus.yml") for flag in prometheus["command"]
    )


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    found = services()
    grafana = found["grafana"]
    bound = mounts(grafana)
    provisioning = ROOT / bound["/etc/grafana/provisioning"]
    [source] = load(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert any(str(port).endswith(":9090") for port in found["prometheus"]["ports"])
    [provider] = load(provisioning / "dashboards" / "respgate.yml")["providers"]
    dashboards_dir = provider["options"]["path"]
    assert (ROOT / bound[dashboards_dir] / "respgate.json").is_file()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/respgate.json"
    assert "grafana_admin_password" in grafana["secrets"]
