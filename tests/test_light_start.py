"""The light install: starting the gateway and the CLI imports neither torch nor
sentence-transformers (they come with the ``embeddings`` extra, for file search's local model,
and are imported only when a file is first embedded)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

START = """
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from app.cli import build_parser
from app.demo import run_demo
from app.main import create_app
from app.settings import load_settings

build_parser()
settings = load_settings(None, data_dir=Path(sys.argv[1]), upstream_url="http://127.0.0.1:9")
with TestClient(create_app(settings)) as client:
    assert client.get("/health").status_code == 200
    assert client.get("/v1/vector_stores").status_code == 200
heavy = ("torch", "sentence_transformers", "transformers")
print(sorted(name for name in heavy if name in sys.modules))
"""


def test_start_up_imports_no_torch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
