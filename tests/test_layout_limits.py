"""Size limits of the code in ``app/`` (issue 13), checked with ``ast``:

1. a module has at most ``MAX_MODULE_LINES`` lines;
2. a class has at most ``MAX_CLASS_METHODS`` methods (``def`` / ``async def`` directly in its
   body, properties and dunders included);
3. a function or method has at most ``MAX_PARAMETERS`` parameters, not counting ``self`` /
   ``cls`` nor ``*args`` / ``**kwargs`` (group parameters that travel together into a small
   frozen dataclass).

A failure lists every offender as ``path:line  what  figure > limit``: split the module or the
class by concept, or group the parameters. ``KNOWN_OFFENDERS`` is the place
for an exception the team agrees to (empty since issue 13); an entry that no longer offends
fails too (as import-linter's stale ignores do), so delete it when the fix lands.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

MAX_MODULE_LINES = 450
MAX_CLASS_METHODS = 20
MAX_PARAMETERS = 6

# (path, kind, name): kind "module" (name ""), "class" (its qualified name) or "parameters"
# (the function's qualified name).
KNOWN_OFFENDERS: frozenset[tuple[str, str, str]] = frozenset()


@dataclass(frozen=True)
class Offence:
    path: str
    line: int
    kind: str
    name: str
    figure: int
    limit: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.kind, self.name)

    def __str__(self) -> str:
        what = {
            "module": "module lines",
            "class": f"methods of class {self.name}",
            "parameters": f"parameters of {self.name}()",
        }[self.kind]
        return f"{self.path}:{self.line}  {what}  {self.figure} > {self.limit}"


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    """Positional-only, positional and keyword-only parameters, less a method's first
    ``self`` / ``cls`` (``*args`` and ``**kwargs`` are not in these lists)."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    if in_class and positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    return len(positional) + len(args.kwonlyargs)


def offences_in(path: Path, root: Path = ROOT) -> list[Offence]:
    source = path.read_text(encoding="utf-8")
    relative = path.relative_to(root).as_posix()
    found: list[Offence] = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(Offence(relative, 1, "module", "", lines, MAX_MODULE_LINES))

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                methods = sum(
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in child.body
                )
                if methods > MAX_CLASS_METHODS:
                    found.append(
                        Offence(relative, child.lineno, "class", name, methods, MAX_CLASS_METHODS)
                    )
                visit(child, name + ".", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                count = parameter_count(child, in_class)
                if count > MAX_PARAMETERS:
                    found.append(
                        Offence(relative, child.lineno, "parameters", name, count, MAX_PARAMETERS)
                    )
                visit(child, name + ".", False)
            else:
                visit(child, prefix, in_class)

    visit(ast.parse(source, filename=relative), "", False)
    return found


def all_offences() -> list[Offence]:
    return [offence for path in sorted(APP.rglob("*.py")) for offence in offences_in(path)]


def test_app_is_within_the_size_limits() -> None:
    new = [str(o) for o in all_offences() if o.key not in KNOWN_OFFENDERS]
    assert not new, (
        "Over issue 13's size limits (split the module or class by concept; group parameters "
        "into a frozen dataclass):\n  " + "\n  ".join(new)
    )


def test_the_known_offenders_still_offend() -> None:
    current = {o.key for o in all_offences()}
    stale = sorted(KNOWN_OFFENDERS - current)
    assert not stale, (
        "KNOWN_OFFENDERS lists entries that are now within the limits; delete them:\n  "
        + "\n  ".join(f"{path}  {kind}  {name}".rstrip() for path, kind, name in stale)
    )


def test_the_checker_sees_each_kind_of_offence(tmp_path: Path) -> None:
    """The rules themselves, on a module made to break each one once (and to keep within
    them otherwise: ``self``, ``*args`` and ``**kwargs`` are not counted)."""
    methods = "".join(f"    def m{i}(self) -> None: ...\n" for i in range(MAX_CLASS_METHODS + 1))
    source = (
        "class Big:\n"
        + methods
        + "    def fine(self, a, b, c, d, e, f, *args, **kwargs): ...\n"
        + "    @classmethod\n    def also_fine(cls, a, b, c, d, e, /, *, f): ...\n"
        + "async def wide(a, b, c, d, e, f, g): ...\n"
        + "def outer():\n    def inner(a, b, c, d, *, e, f, g): ...\n"
        + "#\n" * MAX_MODULE_LINES
    )
    module = tmp_path / "probe.py"
    module.write_text(source, encoding="utf-8")
    found = {(o.kind, o.name, o.figure) for o in offences_in(module, tmp_path)}
    assert found == {
        ("module", "", len(source.splitlines())),
        ("class", "Big", MAX_CLASS_METHODS + 3),
        ("parameters", "wide", 7),
        ("parameters", "outer.inner", 7),
    }
