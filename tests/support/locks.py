"""Reading requirements/*.lock (what `make lock` writes with `uv pip compile --generate-hashes`) and pyproject.toml's
dependencies, and checking one against the other: the packaging tests use it without the network."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "treadle"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: frozenset[str]


def read_lock(text: str) -> dict[str, Pin]:
    """Package name (canonical) -> its pin. A pin's hashes are on the continuation lines that follow it."""
    pins: dict[str, Pin] = {}
    name = None
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            name = canonicalize_name(match[1])
            if name in pins:
                raise ValueError(f"{match[1]} is pinned twice")
            pins[name] = Pin(match[2], frozenset())
        elif name is not None and line.startswith(" "):
            found = frozenset(_HASH.findall(line))
            pins[name] = Pin(pins[name].version, pins[name].hashes | found)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"a lock line that is neither a pin nor a hash nor a comment: {line!r}")
    return pins


def requirements(pyproject: dict[str, Any], group: str) -> list[Requirement]:
    """The requirements of one install: "base", an extra's name (self-references such as treadle[server]
    expanded), or "build" (the build backend)."""
    if group == "build":
        return [Requirement(r) for r in pyproject["build-system"]["requires"]]
    project = pyproject["project"]
    raw = list(project["dependencies"])
    if group != "base":
        raw += project["optional-dependencies"][group]
    out: list[Requirement] = []
    for text in raw:
        req = Requirement(text)
        if canonicalize_name(req.name) == PROJECT:
            for extra in sorted(req.extras):
                out += [r for r in requirements(pyproject, extra) if r not in out]
        elif req not in out:
            out.append(req)
    return out


def lock_problems(reqs: list[Requirement], pins: dict[str, Pin]) -> list[str]:
    """What keeps `pins` from satisfying `reqs`: a package missing, a version outside its specifier, a pin without
    a hash (pip --require-hashes refuses it)."""
    problems = []
    for req in reqs:
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req} is not pinned")
            continue
        if not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req} is pinned at {pin.version}, outside its specifier")
    problems += [f"{name}=={pin.version} has no hash" for name, pin in pins.items() if not pin.hashes]
    return problems


def load_pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def load_lock(name: str) -> dict[str, Pin]:
    return read_lock((ROOT / "requirements" / f"{name}.lock").read_text())
