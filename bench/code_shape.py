"""Print the shape of the package: lines per package, longest functions, ``Any`` count, constructor parameters.

Used for issue 13's before/after table: ``python bench/code_shape.py [--src src/memmy] [--top 10]``.
No timing here, so the machine's load does not matter.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path


def _functions(tree: ast.AST) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((f"{node.name}.{item.name}", (item.end_lineno or item.lineno) - item.lineno + 1))
        elif isinstance(node, ast.Module):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((item.name, (item.end_lineno or item.lineno) - item.lineno + 1))
    return found


def _init_params(tree: ast.AST) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    count = len(args.args) - 1 + len(args.kwonlyargs)
                    out.append((node.name, count))
    return out


def _body_any_params(tree: ast.AST) -> int:
    """Parameters annotated ``Any`` or ``dict[str, Any]`` (the untyped request bodies of the issue)."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.args + node.args.kwonlyargs:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg in {"body", "params", "args", "payload", "request"} and "Any" in text:
                    count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", default="src/memmy")
    parser.add_argument("--top", type=int, default=10)
    opts = parser.parse_args()
    root = Path(opts.src)
    lines: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    anys = 0
    body_any: Counter[str] = Counter()
    functions: list[tuple[str, int]] = []
    inits: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        package = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        text = path.read_text(encoding="utf-8")
        lines[package] += text.count("\n")
        modules[package] += 1
        tree = ast.parse(text)
        anys += sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Any")
        body_any[package] += _body_any_params(tree)
        functions += [(f"{rel}:{name}", size) for name, size in _functions(tree)]
        inits += [(f"{rel}:{name}", size) for name, size in _init_params(tree)]
    print(f"{'package':<14}{'modules':>8}{'lines':>8}{'untyped body params':>21}")
    for package in sorted(lines):
        print(f"{package:<14}{modules[package]:>8}{lines[package]:>8}{body_any[package]:>21}")
    print(f"{'total':<14}{sum(modules.values()):>8}{sum(lines.values()):>8}{sum(body_any.values()):>21}")
    print(f"\n`Any` names: {anys}")
    print(f"\nlongest functions (top {opts.top}):")
    for name, size in sorted(functions, key=lambda f: -f[1])[: opts.top]:
        print(f"  {size:>4}  {name}")
    print(f"\nconstructors with the most parameters (top {opts.top}):")
    for name, size in sorted(inits, key=lambda f: -f[1])[: opts.top]:
        print(f"  {size:>4}  {name}")
    service_inits = [size for name, size in inits if name.startswith("service/")]
    if service_inits:
        print(f"\nservice/ constructors: {len(service_inits)}, max {max(service_inits)} parameters")


if __name__ == "__main__":
    main()
