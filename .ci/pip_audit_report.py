"""Read pip-audit's JSON report (``pip-audit --format json``) and print what it found.

Usage: python .ci/pip_audit_report.py REPORT.json

Prints every known vulnerability (package, version, advisory id, aliases, fixed versions) and how
many packages could not be audited. Exit status:
  0  audited, nothing found
  1  vulnerabilities found
  2  the vulnerability database could not be reached: no package was audited (pip-audit reports
     every package "not found on PyPI" when the PyPI JSON API does not answer) or the report is
     missing or unreadable (pip-audit failed before writing it)
Standard library only: it runs on the interpreter of the audited environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(path: str) -> int:
    try:
        report: dict[str, Any] = json.loads(Path(path).read_text())
        dependencies: list[dict[str, Any]] = report["dependencies"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"pip-audit wrote no readable report ({type(exc).__name__}: {exc})")
        return 2
    skipped = [d for d in dependencies if "skip_reason" in d]
    audited = [d for d in dependencies if "skip_reason" not in d]
    if dependencies and not audited:
        print(f"none of {len(dependencies)} packages could be audited; first reason:")
        print(f"  {skipped[0]['skip_reason']}")
        return 2
    found = [(d, v) for d in audited for v in d.get("vulns", [])]
    counts = f"{len(audited)} packages audited, {len(skipped)} not audited"
    print(f"{counts}, {len(found)} known vulnerabilities")
    for dependency in skipped:
        print(f"  not audited: {dependency['skip_reason']}")
    for dependency, vuln in found:
        aliases = ", ".join(vuln.get("aliases") or []) or "-"
        fixed = ", ".join(vuln.get("fix_versions") or []) or "no fixed version yet"
        print(
            f"VULNERABLE {dependency['name']} {dependency['version']}: {vuln['id']} "
            f"(aliases: {aliases}; fixed in: {fixed})"
        )
        description = " ".join(str(vuln.get("description") or "").split())
        if description:
            print(f"    {description[:300]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
