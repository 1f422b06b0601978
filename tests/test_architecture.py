"""docs/architecture.md's layer map against the package: every room is on it, and imports only
go down it (a module imports from its own line and the lines above, never from one below)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bendserver"
FOUNDATIONS = "*.py"


def layer_map() -> list[str]:
    """The map's entries in order, relative to the package: ``*.py`` (the foundations),
    ``room/``, ``room/part.py`` or ``module.py``."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"## Layers\n.*?```\n(.*?)```", text, re.DOTALL)
    assert block, "docs/architecture.md has a '## Layers' section with the map in a code block"
    entries = [line.split()[0] for line in block.group(1).splitlines() if line.strip()]
    assert all(e.startswith("bendserver/") for e in entries), entries
    return [e.removeprefix("bendserver/") for e in entries]


def modules() -> list[str]:
    """Every module of the package, relative to it (``engine/node.py``)."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def height(module: str, entries: list[str]) -> int:
    """The line of the map ``module`` is on (a split room's ``__init__.py``: its first part's)."""
    room = module.split("/")[0] + "/" if "/" in module else None
    for index, entry in enumerate(entries):
        if entry == module or (room is not None and entry == room):
            return index
        if module.endswith("/__init__.py") and entry.startswith(room or "\0"):
            return index
    if room is None and FOUNDATIONS in entries:
        return entries.index(FOUNDATIONS)
    raise AssertionError(f"bendserver/{module} is on no line of docs/architecture.md's map")


def imported(module: str, known: set[str]) -> set[str]:
    """The package's modules ``module`` imports, at run time (``TYPE_CHECKING`` imports
    aside), wherever the import stands (lazy imports in functions included)."""
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    package = module.split("/")[:-1]
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level or id(node) in typing_only:
            continue
        base = package[: len(package) - (node.level - 1)]
        path = "/".join(base + (node.module.split(".") if node.module else []))
        prefix = f"{path}/" if path else ""
        for alias in node.names:  # a submodule imported by name, else the module itself
            if f"{prefix}{alias.name}.py" in known:
                found.add(f"{prefix}{alias.name}.py")
            elif f"{path}.py" in known:
                found.add(f"{path}.py")
            elif f"{prefix}__init__.py" in known:
                found.add(f"{prefix}__init__.py")
    return found


def test_the_map_names_every_room_of_the_package_and_no_other():
    entries = layer_map()
    rooms = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("*/__init__.py")}
    mapped = {e.split("/")[0] for e in entries if "/" in e}
    assert mapped == rooms, (
        f"rooms not on the map: {sorted(rooms - mapped)}; on the map but not in the package: "
        f"{sorted(mapped - rooms)} (docs/architecture.md, '## Layers')"
    )
    named = {e for e in entries if e.endswith(".py") and e != FOUNDATIONS}
    assert named <= set(modules()), f"no such module: {sorted(named - set(modules()))}"
    for module in modules():
        height(module, entries)  # each module is on one line


def test_imports_never_go_up_the_map():
    entries, known = layer_map(), set(modules())
    upward = [
        f"{module} ({entries[height(module, entries)]}) imports {target} "
        f"({entries[height(target, entries)]})"
        for module in sorted(known - {"__init__.py"})
        for target in imported(module, known) - {"__init__.py"}
        if height(target, entries) > height(module, entries)
    ]
    assert not upward, "imports going up docs/architecture.md's map:\n" + "\n".join(upward)
