"""The arrows between packages point down: read every import under libs/ and services/ (with ast, type-only
and function-local ones included) and check them against the layers below."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBS, SERVICES = ROOT / "libs" / "treadle", ROOT / "services" / "treadle"

# A library package may import its own modules and those of strictly lower layers, never a service.
LAYERS = {
    "api": -10,  # the public contract: request bodies, receipts, the fields' limits; pure, below the core
    "core": 0,  # pure: stdlib, msgspec, the contract's field types and itself only
    "views": 10,
    "client": 15,  # the SDK: decodes into the views and the contract's receipts
    "sandbox": 10,
    "webhooks": 20,  # endpoints, matching, signing, address checks and the sender: the SDK's verifier below it
    "eventlog": 30,
    "runtime": 40,  # the worker kit
    "projections": 50,
    "checkpoints": 50,
    "providers": 50,
    "ports": 55,
    "usecases": 58,  # what HTTP routes and MCP tools both call: the caller and the ports as arguments
    "memory": 60,  # Protocols and their in-memory twins (may reuse real types below)
    "ops": 70,  # operator tools: servers, processes, broker auth, tokens, audit
    "cli": 80,
}
PURE = {"core": {"core", "api"}, "api": {"api"}}  # a pure package and the packages it may import
PURE_THIRD_PARTY = {"msgspec"}

# Arrows not cut yet, each with the reason. An entry that no longer matches an import fails the test:
# delete it when its arrow is gone.
ALLOWED = {
    # The schema generator reads the gateway's routes for the OpenAPI document; the views package
    # (issue 18, item 1) gives it the documents to generate from instead.
    ("libs/treadle/cli/schemas.py", "gateway"),
}


def _modules(top: Path) -> list[tuple[Path, str]]:
    out = []
    for path in sorted(top.rglob("*.py")):
        parts = list(path.relative_to(top.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((path, ".".join(parts)))
    return out


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Absolute names of everything `module` imports, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if node.module is None:  # `from . import x`: x may be a module of its own
                names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
            else:
                names.append((base, node.lineno))
    return names


def _arrows():
    """(file, line, importing package, imported name) for every import of the tree."""
    for top in (LIBS, SERVICES):
        for path, module in _modules(top):
            parts = module.split(".")
            if len(parts) < 2:
                continue  # modules directly in the namespace: see test_the_namespace_holds_only_packages
            for name, line in _imports(path, module):
                yield path.relative_to(ROOT).as_posix(), line, top, parts[1], name


def _services() -> set[str]:
    return {p.name for p in SERVICES.iterdir() if (p / "__init__.py").exists()}


def test_every_library_package_has_a_layer():
    packages = {p.name for p in LIBS.iterdir() if (p / "__init__.py").exists()}
    missing = packages - LAYERS.keys()
    assert not missing, f"place {sorted(missing)} in LAYERS of {Path(__file__).name}"


def test_the_namespace_holds_only_packages():
    """`treadle` is a namespace over libs/ and services/; the editable install maps packages only, so a module
    right under it (libs/treadle/x.py) would not be importable."""
    loose = [p.relative_to(ROOT).as_posix() for top in (LIBS, SERVICES) for p in top.glob("*.py")]
    loose += [p.relative_to(ROOT).as_posix() for p in (LIBS / "__init__.py", SERVICES / "__init__.py") if p.exists()]
    assert not loose, f"make these packages (a directory with __init__.py): {loose}"


def test_arrows_point_down():
    services = _services()
    wrong, used = [], set()
    for file, line, top, package, name in _arrows():
        parts = name.split(".")
        if parts[0] != "treadle" or len(parts) < 2 or parts[1] == package:
            continue
        target = parts[1]
        if top == SERVICES:
            ok = target not in services  # a service uses libraries, never another service
        elif target in services:
            ok = False  # a library never imports a service
        else:
            ok = LAYERS.get(target, 1_000) < LAYERS[package]
        if not ok and (file, target) in ALLOWED:
            used.add((file, target))
        elif not ok:
            wrong.append(f"{file}:{line}: {package} -> {target} ({name})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
    stale = ALLOWED - used
    assert not stale, f"these arrows are gone, remove them from ALLOWED: {sorted(stale)}"


def test_the_core_and_the_contract_import_only_the_standard_library_msgspec_and_themselves():
    wrong = []
    for file, line, _top, package, name in _arrows():
        if package not in PURE:
            continue
        root = name.split(".")[0]
        if root == "treadle":
            ok = name.split(".")[1] in PURE[package]
        else:
            ok = root in sys.stdlib_module_names or root in PURE_THIRD_PARTY or root == "__future__"
        if not ok:
            wrong.append(f"{file}:{line}: {name}")
    assert not wrong, "a pure package imports beyond the standard library, msgspec and what it may:\n" + "\n".join(
        wrong
    )
