"""The README's quick start: ``respgate replay`` and ``respgate serve`` as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from app.recording.cassette import load_cassette
from tests.helpers import free_port
from tests.recordings import shared

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "app" / "recording" / "bundled" / "quickstart-vllm-gpt-oss.yaml"


@contextmanager
def process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_http(url: str, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"process exited early:\n{output}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def test_quickstart_cassette_is_a_real_vllm_recording() -> None:
    recorded = shared("reasoning/responses")
    originals = [
        load_cassette(recorded / f"reasoning-single-openai-gpt-oss-20b-{kind}.yaml").turns[0]
        for kind in ("nonstreaming", "streaming")
    ]
    ours = load_cassette(QUICKSTART).turns
    assert [(t.request, t.response) for t in ours] == [(t.request, t.response) for t in originals]


def test_replay_and_serve_processes_answer_the_openai_sdk(tmp_path: Path) -> None:
    replay_port, gateway_port = free_port(), free_port()
    with process("replay", str(QUICKSTART), "--port", str(replay_port)) as replay:
        wait_http(f"http://127.0.0.1:{replay_port}/health", replay)
        with process(
            "serve",
            "--upstream-url",
            f"http://127.0.0.1:{replay_port}",
            "--port",
            str(gateway_port),
            "--host",
            "127.0.0.1",
            "--wait-for-upstream",
            "30",
            env={"RESPGATE_DATA_DIR": str(tmp_path / "data")},
        ) as gateway:
            wait_http(f"http://127.0.0.1:{gateway_port}/health", gateway)
            assert httpx.get(f"http://127.0.0.1:{gateway_port}/ready").status_code == 200
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="none", max_retries=0
            )
            request = {"model": "openai/gpt-oss-20b", "input": "Reply with exactly one word: HELLO"}
            for _ in range(2):  # the same request twice in a row: answered both times
                answer = client.responses.create(**request, store=True, stream=False)
                assert answer.output_text.strip() == "HELLO"
            for _ in range(2):
                with client.responses.stream(**request, store=True) as stream:
                    final = stream.get_final_response()
                assert final.output_text == "HELLO"
                assert [item.type for item in final.output] == ["reasoning", "message"]
            assert (tmp_path / "data").is_dir()


def test_serve_refuses_a_bad_configuration(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = 'x'\n")
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--config", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("respgate: invalid configuration in ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("seconds", ["1"])
def test_wait_for_upstream_gives_up_when_the_upstream_never_comes(
    seconds: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1"]
    command += ["--data-dir", str(tmp_path)]
    command += ["--upstream-url", f"http://127.0.0.1:{free_port()}", "--port", str(free_port())]
    result = subprocess.run(
        [*command, "--wait-for-upstream", seconds],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("respgate: ")]
    assert line.startswith("respgate: upstream http://127.0.0.1:") and "not ready after 1 s" in line
