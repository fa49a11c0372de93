"""No cycles between the modules of ``treadle.core``: read every import under libs/treadle/core with ast
(type-only and function-local ones included) and fail on any cycle in the module graph."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "libs" / "treadle" / "core"


def _module(path: Path) -> str:
    parts = ["treadle", *path.relative_to(CORE.parent).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in sorted(CORE.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import name` imports the submodule pkg.name when there is one, else pkg itself.
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                if target in modules and target != module:
                    graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    graph = _graph()
    assert "treadle.core.view" in graph["treadle.core.decide"]
    assert "treadle.core.run.evolve" in graph["treadle.core.state"]


def test_no_cycle_between_core_modules():
    cycles = _cycles(_graph())
    assert not cycles, "cycles between core modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_slice_imports_the_composed_state():
    wrong = [
        (m, t)
        for m, targets in _graph().items()
        for t in targets
        if t == "treadle.core.state" and m.count(".") > 2  # a module inside a concept's subpackage
    ]
    assert not wrong, f"slices import treadle.core.state: {wrong}"
