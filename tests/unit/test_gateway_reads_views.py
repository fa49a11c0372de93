"""The gateway serves views, never the domain's state, and its route modules depend on ``deps``, not ``app``."""

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "services" / "treadle" / "gateway"
STATE_MODULES = ("treadle.core.state", "treadle.core.view")
MODELS = ("treadle.core.entity", "treadle.core.activity") + tuple(
    f"treadle.core.{c}.model"
    for c in ("thread", "run", "providers", "requests", "plans", "checkpoints", "lineage", "rollback")
)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            out.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def test_no_gateway_module_imports_the_domain_state():
    for path in sorted(GATEWAY.glob("*.py")):
        for module, names in _imports(path):
            assert not module.startswith(STATE_MODULES), f"{path.name} imports {module}"
            assert not module.endswith(".evolve"), f"{path.name} imports {module}"
            assert "ThreadState" not in names and "fold" not in names, f"{path.name} imports {names} from {module}"
            if module in MODELS:  # only the write side's literal types
                assert set(names) <= {"RuntimeMode"}, f"{path.name} imports {names} from the core's entities"


def test_route_modules_import_deps_not_the_app():
    for path in sorted(GATEWAY.glob("*.py")):
        if path.name in ("app.py", "__main__.py"):
            continue
        modules = [m for m, _ in _imports(path)]
        assert ".app" not in modules and "treadle.gateway.app" not in modules, f"{path.name} imports app.py"
