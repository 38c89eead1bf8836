"""Layering: front ends -> service -> engines -> store/embed/domain; nothing imports upward; no god module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "memmy"

#: component -> components it may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "domain": set(),
    "kinds": {"domain"},
    "config_defaults": set(),
    "config": {"errors", "config_defaults"},
    "store": {"domain", "errors", "kinds"},
    "embed": {"errors"},
    "redact": set(),
    "httpguard": set(),
    "signin": set(),
    "capture": {"domain", "errors", "redact"},
    "recall": {"domain", "errors", "store", "embed", "capture", "llm", "kinds"},
    "llm": {"errors"},
    "evolve": {"domain", "errors", "capture", "llm", "kinds"},
    "sources": {"domain", "errors", "capture", "store", "redact", "transcripts"},
    "indexing": {"domain", "errors", "store", "embed", "kinds"},
    "namespace": {"domain"},
    "commands": {"domain", "errors", "namespace"},
    "daemon_client": {"errors", "commands"},
    "keys": {
        "domain",
        "errors",
        "store",
        "embed",
        "capture",
        "recall",
        "indexing",
        "config",
        "namespace",
        "commands",
        "kinds",
    },
    "jobs": {
        "domain",
        "errors",
        "llm",
        "store",
        "capture",
        "evolve",
        "indexing",
        "config",
        "namespace",
        "commands",
        "kinds",
    },
    "dream": {"domain", "errors", "store", "indexing", "config", "namespace", "commands"},
    "transcripts": set(),
    "traces": {
        "domain",
        "errors",
        "store",
        "capture",
        "indexing",
        "redact",
        "config",
        "transcripts",
        "namespace",
        "kinds",
    },
    "service": {
        "domain",
        "errors",
        "llm",
        "sources",
        "store",
        "embed",
        "capture",
        "recall",
        "evolve",
        "indexing",
        "config",
        "config_defaults",
        "redact",
        "namespace",
        "commands",
        "keys",
        "jobs",
        "dream",
        "traces",
        "kinds",
        "__init__",
    },
    "server": {
        "service",
        "domain",
        "errors",
        "config",
        "config_defaults",
        "store",
        "__init__",
        "mcp",
        "panel",
        "namespace",
        "commands",
        "httpguard",
        "keys",
    },
    "panel": {
        "service",
        "domain",
        "errors",
        "config",
        "config_defaults",
        "integrations",
        "__init__",
        "namespace",
        "commands",
        "keys",
        "signin",
        "kinds",
    },
    "cli": {
        "service",
        "server",
        "domain",
        "errors",
        "config",
        "config_defaults",
        "integrations",
        "sources",
        "mcp",
        "hook",
        "embed",
        "__init__",
        "daemon_client",
    },
    "__main__": {"cli"},
    "integrations": {"__init__"},
    "hook": {"redact", "transcripts"},
    "mcp": {"__init__", "hook", "sources", "redact", "daemon_client"},
    "agent": {
        "daemon_client",
        "errors",
        "domain",
        "config",
        "config_defaults",
        "cli",
        "hook",
        "sources",
        "redact",
        "httpguard",
        "__init__",
        "workbench",
    },
    "workbench": {"agent", "signin", "errors", "__init__"},
    "__init__": set(),
}


def component(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def imported_components(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "memmy":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def test_no_layer_imports_upward() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = component(path)
        allowed = ALLOWED[source] | {source}
        for target in imported_components(path) - allowed:
            violations.append(f"{path.relative_to(PACKAGE)} ({source}) imports memmy.{target}")
    assert violations == []


def test_storage_is_only_reached_through_the_service_from_the_cli() -> None:
    for path in (PACKAGE / "cli").rglob("*.py"):
        assert "store" not in imported_components(path), path


def test_no_god_modules() -> None:
    too_long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 1000
    }
    assert too_long == {}


DOC = PACKAGE.parents[1] / "docs" / "architecture.md"


def documented_layering(text: str) -> dict[str, set[str]]:
    """The ``| Package | May import |`` table of docs/architecture.md as ``{component: allowed}``.

    A row may name several packages; a note in parentheses is ignored; "nothing from memmy" is the empty set.
    """
    section = text.split("| Package | May import |", 1)[1]
    table: dict[str, set[str]] = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cells[0]))
        allowed = set(re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cells[1])))
        for name in names:
            table[name] = allowed
    return table


def test_the_documented_layering_table_is_the_enforced_one() -> None:
    documented = documented_layering(DOC.read_text(encoding="utf-8"))
    assert documented == ALLOWED


def test_every_component_is_in_the_documented_package_list() -> None:
    packages = DOC.read_text(encoding="utf-8").split("## Packages", 1)[1].split("\n## ", 1)[0]
    documented = {name for name in ALLOWED if f"`memmy/{name}/`" in packages or f"memmy/{name}.py" in packages}
    missing = set(ALLOWED) - documented - {"__init__", "__main__"}
    assert missing == set()


def module_name(path: Path) -> str:
    """``memmy.recall.pipeline`` for ``src/memmy/recall/pipeline.py`` (a package by its ``__init__``)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The memmy modules ``path`` imports anywhere: top level, inside functions and under ``TYPE_CHECKING``.

    ``from memmy.a import b`` is the module ``memmy.a.b`` when there is one, else ``memmy.a``.
    """
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_import_cycles_are_found() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_import_cycles() -> None:
    """No two memmy modules import each other, directly or round a circle (lazy and type-only imports count)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: module_imports(path, set(paths)) for name, path in paths.items()}
    assert import_cycles(graph) == []


#: Where a memory's properties may be read or written by key: the kinds that own them, and ``Memory.summary``
#: in ``domain.py`` (below ``kinds/``, it reads the one property every memory has).
PROPERTY_OWNERS = ("kinds/", "domain.py")


def property_reads(tree: ast.AST) -> list[int]:
    """Lines of ``properties[...]`` and ``properties.get(...)``, on a name or an attribute called ``properties``."""

    def is_properties(node: ast.expr) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "properties") or (
            isinstance(node, ast.Name) and node.id == "properties"
        )

    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_properties(node.value):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_properties(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_property_reads_are_found() -> None:
    code = "a = m.properties['x']\nb = properties.get('y')\nm.properties['z'] = 1\nc = m.props.get('w')\n"
    assert property_reads(ast.parse(code)) == [1, 2, 3]


def test_only_the_kinds_read_memory_properties_by_key() -> None:
    """A memory's properties are read and written through ``memmy.kinds``, never by string key elsewhere."""
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not str(path.relative_to(PACKAGE)).startswith(PROPERTY_OWNERS)
        for line in property_reads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []
