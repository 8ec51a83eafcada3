"""Installed-looking distributions for plugin tests: a module and a ``*.dist-info`` (METADATA and
entry_points.txt) written into a directory on ``sys.path``, as pip would leave them, so
``importlib.metadata`` finds their entry points."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest


class Site:
    """A site directory on ``sys.path`` for the test's duration."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def module_name(self, stem: str) -> str:
        """A module name no other test uses (modules stay cached in ``sys.modules``)."""
        name = f"{stem}_{uuid.uuid4().hex[:10]}"
        self.modules.append(name)
        return name

    def install(
        self,
        distribution: str,
        modules: Mapping[str, str],
        entry_points: Mapping[str, Mapping[str, str]],
    ) -> None:
        """Write ``modules`` (name -> source) and the dist-info of ``distribution`` 1.0 with
        ``entry_points`` (group -> name -> ``module:attribute``)."""
        for name, source in modules.items():
            (self.root / f"{name}.py").write_text(source)
        info = self.root / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n"
        )
        lines: list[str] = []
        for group, entries in entry_points.items():
            lines.append(f"[{group}]")
            lines.extend(f"{name} = {value}" for name, value in entries.items())
            lines.append("")
        (info / "entry_points.txt").write_text("\n".join(lines))


def installed_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The body of a ``site`` fixture: a fresh directory on ``sys.path``; the modules written
    into it are forgotten afterwards."""
    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    installed = Site(root)
    yield installed
    for name in installed.modules:
        sys.modules.pop(name, None)
