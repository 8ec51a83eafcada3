"""``respgate demo`` as a user runs it: one process, the quick start's prompt answered as often
as asked, an unknown prompt refused clearly, and nothing left running after Ctrl-C/SIGTERM."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.helpers import free_port

MODEL = "openai/gpt-oss-20b"
PROMPT = "Reply with exactly one word: HELLO"


def wait_healthy(url: str, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"respgate demo exited early:\n{out}\n{err}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (``ps`` works on Linux and macOS alike)."""
    table = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True)
    children: dict[int, list[int]] = {}
    for line in table.stdout.splitlines():
        child, parent = (int(field) for field in line.split())
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def is_running(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(state.stdout.strip()) and not state.stdout.strip().startswith("Z")


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def ask_everything(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    for _ in range(2):
        answer = client.responses.create(model=MODEL, input=PROMPT)
        assert answer.output_text == "HELLO"
    for _ in range(2):
        with client.responses.stream(model=MODEL, input=PROMPT) as stream:
            final = stream.get_final_response()
        assert final.output_text == "HELLO"
        assert [item.type for item in final.output] == ["reasoning", "message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="What is the capital of France?")
    message = refused.value.message
    assert "What is the capital of France?" in message
    assert PROMPT in message


@pytest.mark.parametrize(
    ("stop", "data_dir"),
    [(signal.SIGINT, None), (signal.SIGTERM, "state")],
    ids=["SIGINT-temporary-state", "SIGTERM-data-dir"],
)
def test_demo_answers_the_quick_start_and_stops_everything(
    tmp_path: Path, stop: signal.Signals, data_dir: str | None
) -> None:
    port = free_port()
    command = [sys.executable, "-m", "app.cli", "demo", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--data-dir", str(tmp_path / data_dir)] if data_dir else command,
        cwd=tmp_path,  # the bundled cassette is found from anywhere
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", proc)
        ask_everything(f"http://127.0.0.1:{port}/v1")
        below = descendants(proc.pid)
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err
    assert f"http://127.0.0.1:{port}/v1" in out
    replay = re.search(r"at http://127\.0\.0\.1:(\d+)\.", out)
    assert replay is not None, out
    assert [pid for pid in below if is_running(pid)] == []
    assert port_is_free(port) and port_is_free(int(replay[1]))
    if data_dir is None:  # a temporary directory, removed: nothing is left behind
        assert list(tmp_path.iterdir()) == []
    else:
        assert (tmp_path / data_dir / "respgate.db").is_file()
