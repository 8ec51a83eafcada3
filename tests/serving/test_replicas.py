"""Several replicas behind a proxy: ``docker-compose.replicas.yml`` is coherent, and the nginx
configuration it mounts (deploy/nginx/respgate.conf) really load-balances two ``respgate
serve`` processes on one PostgreSQL, SSE streamed through, when nginx is installed (Debian's
nginx-light; scripts/provision installs it)."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.background.test_background_api import wait_for_status
from tests.helpers import ROOT, free_port, gateway_process, serve_in_thread
from tests.serving.support import DEADLINE, HeldUpstream, write_config
from tests.test_container import (
    IMAGE_TOOLS,
    assert_cli_accepts,
    setting_name,
)

COMPOSE = ROOT / "docker-compose.replicas.yml"
NGINX_CONF = ROOT / "deploy" / "nginx" / "respgate.conf"
REPLICAS = ("respgate-1", "respgate-2")
TOOLS = {**IMAGE_TOOLS, "redis": {"redis-cli"}}


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return loaded


def nginx_servers() -> list[str]:
    """The ``server host:port`` lines of the nginx upstream block."""
    return re.findall(r"^\s*server\s+([\w.-]+:\d+)", NGINX_CONF.read_text(), re.MULTILINE)


def test_compose_runs_two_replicas_of_one_gateway(services: dict[str, dict[str, Any]]) -> None:
    first, second = (services[name] for name in REPLICAS)
    assert first == second, "the replicas differ only by name"
    assert first["image"] == services["respgate-migrate"]["image"]
    assert "build" in services["respgate-migrate"]
    built = services["respgate-migrate"]
    extras = str(built["build"]["args"]["EXTRAS"]).split(",")
    assert "redis" in extras  # the replicas set RESPGATE_REDIS_URL: redis-py must be in the image
    assert first["image"] == built["image"]
    assert not first.get("ports"), "replicas are reached through the proxy only"
    assert "9000" in [str(port) for port in first["expose"]]
    assert_cli_accepts(first["command"])
    env = first["environment"]
    for key in env:
        assert setting_name(key) is not None, key
    # Shared state: PostgreSQL (several writers), its URL and the postgres service's password
    # from the secret files deploy/make-secrets.sh writes together (tests/test_container.py);
    # one compaction key; one /data volume (uploaded files' bytes).
    pg = services["postgres"]
    assert pg["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "postgres_password" in pg["secrets"]
    assert env["RESPGATE_DATABASE_URL_FILE"] == "/run/secrets/database_url"
    assert env["RESPGATE_COMPACTION_KEY_FILE"] == "/run/secrets/compaction_key"
    assert {"database_url", "compaction_key"} <= set(first["secrets"])
    assert "respgate-data:/data" in first["volumes"]
    assert env["RESPGATE_REDIS_URL"].startswith("redis://redis:6379")
    drain = float(env["RESPGATE_DRAIN_TIMEOUT_SECONDS"])
    assert float(first["stop_grace_period"].removesuffix("s")) > drain
    for dependency in ("postgres", "redis", "respgate-migrate"):
        assert dependency in first["depends_on"]


def test_compose_proxy_balances_the_replicas_with_the_repo_nginx_config(
    services: dict[str, dict[str, Any]],
) -> None:
    proxy = services["proxy"]
    assert proxy["image"].startswith("nginx:")
    assert proxy["ports"] == ["127.0.0.1:9000:80"]
    mounted = {v.split(":")[0]: v.split(":")[1] for v in proxy["volumes"]}
    assert mounted["./deploy/nginx/respgate.conf"] == "/etc/nginx/conf.d/default.conf"
    assert re.search(r"^\s*listen\s+80;", NGINX_CONF.read_text(), re.MULTILINE)
    assert nginx_servers() == [f"{name}:9000" for name in REPLICAS]
    for name in REPLICAS:
        assert proxy["depends_on"][name] == {"condition": "service_healthy"}
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= set(services), name
        if "healthcheck" in service:
            _, tool, *_ = service["healthcheck"]["test"]
            assert tool in TOOLS[service["image"].split(":")[0]], name


def test_nginx_config_streams_sse_unbuffered() -> None:
    text = NGINX_CONF.read_text()
    assert re.search(r"^\s*proxy_buffering off;", text, re.MULTILINE)
    assert re.search(r"^\s*proxy_http_version 1.1;", text, re.MULTILINE)
    timeout = re.search(r"^\s*proxy_read_timeout (\d+)s;", text, re.MULTILINE)
    assert timeout is not None and int(timeout[1]) >= 600  # the upstream's read timeout


# ------------------------------------------------------------------ nginx for real


@contextlib.contextmanager
def nginx_in_front(tmp_path: Path, replicas: list[str]) -> Iterator[tuple[str, Path]]:
    """nginx running the repository's config, its upstream servers replaced by ``replicas``
    (host:port) and listening on a free loopback port; yields its URL and its access log
    (each line: the request, the status and the replica that answered it)."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if nginx is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; scripts/provision)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    site = NGINX_CONF.read_text().replace("listen 80;", f"listen 127.0.0.1:{port};")
    for name, address in zip(REPLICAS, replicas, strict=True):
        site = site.replace(f"server {name}:9000", f"server {address}")
    (tmp_path / "site.conf").write_text(site)
    log = tmp_path / "access.log"
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"daemon off;\nworker_processes 1;\npid {tmp_path}/nginx.pid;\n"
        f"error_log {tmp_path}/error.log;\nevents {{ worker_connections 256; }}\n"
        "http {\n"
        "  log_format replicas '$request $status $upstream_addr';\n"
        f"  access_log {log} replicas;\n"
        f"  client_body_temp_path {tmp_path}/body;\n  proxy_temp_path {tmp_path}/proxy;\n"
        f"  include {tmp_path}/site.conf;\n}}\n"
    )
    argv = [nginx, "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                errors = (tmp_path / "error.log").read_text() if proc.poll() is not None else ""
                raise AssertionError(f"nginx did not start: {errors}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.05)
        yield url, log
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE)


def test_two_replicas_behind_nginx_serve_json_sse_and_background(
    postgres_url: str, tmp_path: Path
) -> None:
    upstream = HeldUpstream()
    upstream.release.set()  # nothing held: streams run through
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, database_url=postgres_url)
        with (
            gateway_process(config) as (first, _),
            gateway_process(config) as (second, _),
        ):
            replicas = [first.removeprefix("http://"), second.removeprefix("http://")]
            with nginx_in_front(tmp_path / "nginx", replicas) as (url, log):
                client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
                answer = client.responses.create(model="m", input="hi")
                assert answer.output_text == "done"
                with client.responses.create(model="m", input="hi", stream=True) as stream:
                    types = [event.type for event in stream]
                assert types[0] == "response.created" and types[-1] == "response.completed"
                queued = client.responses.create(model="m", input="hi", background=True)
                done = wait_for_status(client, queued.id, {"completed", "failed"})
                assert done.status == "completed"
                again = client.responses.retrieve(answer.id)
                assert again.output_text == "done"
            served = [line.split()[-1] for line in log.read_text().splitlines() if "/v1/" in line]
    assert set(served) == set(replicas), served  # both replicas answered through the proxy
