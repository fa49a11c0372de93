"""The type gate (``make test`` runs plain ``mypy``) reads every module: the sources mypy's own option parser
derives from pyproject's ``[tool.mypy]`` are compared with the files on disk, and every product module is
checked with ``--strict``'s flags (a relaxation for one of them has to show up here first)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from mypy.main import process_options
from mypy.options import Options

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "libs" / "treadle", ROOT / "services" / "treadle"]
SUPPORT = ROOT / "tests" / "support"
BENCH = ROOT / "bench"
STRICT_FLAGS = [
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_decorators",
    "check_untyped_defs",
    "warn_return_any",
    "strict_equality",
    "extra_checks",
]


def _module(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _on_disk() -> dict[str, set[str]]:
    return {
        "product": {_module(p, top.parent) for top in PRODUCT for p in top.rglob("*.py")},
        "support": {_module(p, ROOT) for p in SUPPORT.rglob("*.py")},
        "bench": {p.stem for p in BENCH.glob("*.py")},  # bench/ is on mypy_path: its scripts are top-level
    }


@pytest.fixture(scope="module")
def gate() -> tuple[set[str], Options]:
    """What ``mypy`` with no arguments would check, from the repository root (where make runs it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        sources, options = process_options([], stdout=io.StringIO(), stderr=io.StringIO())
    return {s.module for s in sources}, options


def test_make_test_runs_mypy_on_its_configured_files() -> None:
    """Arguments would replace pyproject's ``files`` (``-p treadle`` read libs/ alone: treadle is a namespace
    over libs/ and services/, and ``-p`` walks only the first directory that holds it)."""
    recipe = [line.strip() for line in (ROOT / "Makefile").read_text().splitlines() if re.search(r"\bmypy\b", line)]
    calls = [line for line in recipe if line.startswith("$(BIN)/mypy")]
    assert calls == ["$(BIN)/mypy"], calls


def test_mypy_sees_every_module(gate: tuple[set[str], Options]) -> None:
    seen, _ = gate
    for kind, modules in _on_disk().items():
        assert modules, kind
        missing = sorted(modules - seen)
        assert not missing, f"the type gate does not read these {kind} modules: {missing}"
    assert sum(map(len, _on_disk().values())) == len(seen), sorted(seen - set().union(*_on_disk().values()))


def test_product_and_support_modules_are_strict(gate: tuple[set[str], Options]) -> None:
    _, options = gate
    disk = _on_disk()
    for module in sorted(disk["product"] | disk["support"]):
        own = options.clone_for_module(module)
        relaxed = [flag for flag in STRICT_FLAGS if not getattr(own, flag)]
        if module.startswith("tests.support"):
            relaxed = [flag for flag in relaxed if flag != "warn_return_any"]  # HTTP answers' JSON (pyproject)
        assert not relaxed, f"{module} is checked without {relaxed}"
        assert not own.ignore_errors and own.follow_imports == "normal", module


def test_bench_scripts_are_checked(gate: tuple[set[str], Options]) -> None:
    """bench/ runs at default strictness, bodies included; its override lists exactly the scripts there are."""
    _, options = gate
    scripts = _on_disk()["bench"]
    for module in scripts:
        own = options.clone_for_module(module)
        assert own.check_untyped_defs and not own.ignore_errors and own.follow_imports == "normal", module
    relaxed = {m for m, o in options.per_module_options.items() if o.get("disallow_untyped_defs") is False}
    assert relaxed == scripts, sorted(relaxed ^ scripts)
