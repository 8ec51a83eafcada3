"""Run a command with a read-only root filesystem, as ``docker run --read-only`` would, without
Docker: ``unshare`` gives this script a private mount namespace, in which it bind-mounts each
``--writable`` directory onto itself, remounts every other mount read-only (except /proc, /sys
and /dev, which a container has too), and then executes the command. A write anywhere else
fails with EROFS, whoever the process runs as.

    unshare --mount --propagation private -- python -I enter.py --writable D ... -- COMMAND ...

(``unshare --user --map-root-user --mount`` when not root.) Run with ``-I`` so that nothing of
the command's environment (PYTHONPATH ...) applies to this script; the command gets it all.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

PSEUDO = ("/proc", "/sys", "/dev")
LOCKED = ("nosuid", "nodev", "noexec")  # kept when remounting (a user namespace must keep them)


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        path = path.replace("\\" + code, chr(int(code, 8)))
    return path


def mounts() -> list[tuple[str, list[str]]]:
    """Every mount point, with its per-mount options."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            found.append((_unescape(fields[4]), fields[5].split(",")))
    return found


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writable", action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    writable = [os.path.realpath(path) for path in args.writable]
    for path in writable:
        mount("--bind", path, path)
    for point, options in mounts():
        if point in writable or any(point == p or point.startswith(p + "/") for p in PSEUDO):
            continue
        flags = ["remount", "bind", "ro", *(o for o in options if o in LOCKED)]
        mount("-o", ",".join(flags), point)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
