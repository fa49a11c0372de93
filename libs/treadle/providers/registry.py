"""The providers: each one's name, what orchestration may know of it (its ``ProviderSpec``, given to the core
as data in ``CATALOGUE``) and which adapter serves it. Adding a provider is a row of ``PROVIDERS``.

Real runtimes are imported only when a session asks for them, so a host without Codex or Claude Code
installed still serves the scripted provider."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from treadle.core.providers.catalogue import Catalogue, ProviderSpec

from .base import ProviderAdapter, UnknownProvider
from .protocol import PlaceSession

if TYPE_CHECKING:
    from ..sandbox.host import Sandbox


@dataclass(frozen=True)
class Provider:
    spec: ProviderSpec
    adapter: str  # "module:Class", constructed as ``Class(workspace, request, state_dir)``


SCRIPTED = "treadle.providers.scripted:ScriptedAdapter"
PROVIDERS: tuple[Provider, ...] = (
    # plays the script a message carries (core/script.py), which may name its capability profile
    Provider(ProviderSpec(name="scripted", turn_options="script"), SCRIPTED),
    Provider(ProviderSpec(name="scripted-b", turn_options="script"), SCRIPTED),  # a second one to switch to (L5)
    # a turn may plan first (Codex's collaboration mode), as a task delegated in plan mode does
    Provider(
        ProviderSpec(
            name="codex",
            turn_options="options",
            options={"collaboration_mode": ("plan", "default")},
            plan={"collaboration_mode": "plan"},
        ),
        "treadle.providers.codex:CodexAdapter",
    ),
    Provider(ProviderSpec(name="claude"), "treadle.providers.claude:ClaudeAdapter"),
    # acp-<name>: an ACP agent configured by name (TREADLE_ACP_AGENTS), all served by one adapter
    Provider(ProviderSpec(name="acp-", family=True, member="agent"), "treadle.providers.acp:AcpAdapter"),
)
CATALOGUE = Catalogue(tuple(p.spec for p in PROVIDERS))
ADAPTERS: dict[str, str] = {p.spec.name: p.adapter for p in PROVIDERS if not p.spec.family}


def offered() -> list[str]:
    """The names a caller may pick on this deployment: every provider, and each family's configured members."""
    from .acp.settings import configured_providers

    return [*ADAPTERS, *configured_providers()]


class AdapterClass(Protocol):
    """How the host constructs an adapter class of ``ADAPTERS``: ``ProviderAdapter.__init__`` takes only the
    workspace, every adapter declares these arguments itself."""

    def __call__(
        self, workspace: Path, request: PlaceSession, state_dir: Path, *, sandbox: Sandbox | None = None
    ) -> ProviderAdapter: ...


if TYPE_CHECKING:  # the type checker holds each class of ADAPTERS to that (imported lazily at run time)
    from .acp import AcpAdapter
    from .claude import ClaudeAdapter
    from .codex import CodexAdapter
    from .scripted import ScriptedAdapter

    _CHECKED: tuple[AdapterClass, ...] = (ScriptedAdapter, CodexAdapter, ClaudeAdapter, AcpAdapter)


def adapter_class(provider: str) -> AdapterClass:
    family = next((p.adapter for p in PROVIDERS if p.spec.family and p.spec.names(provider)), None)
    target = ADAPTERS.get(provider) or family
    if target is None:
        raise UnknownProvider(f"provider {provider!r} is not known to this host")
    module, cls = target.split(":")
    adapter: AdapterClass = getattr(importlib.import_module(module), cls)
    return adapter


def create_adapter(
    request: PlaceSession, workspace: Path, state_dir: Path, sandbox: Sandbox | None = None
) -> ProviderAdapter:
    """``state_dir`` is the host's private directory for the session's runtime files (config homes).
    ``sandbox`` (``treadle.sandbox.host.Sandbox``) goes to the adapters that start a runtime process
    (``sandboxed = True``); the scripted provider runs inside the host and gets none."""
    cls = adapter_class(request.provider)
    if sandbox is not None and (getattr(cls, "sandboxed", False) or getattr(cls, "writes_as_tenant", False)):
        return cls(workspace, request, state_dir, sandbox=sandbox)
    return cls(workspace, request, state_dir)


def check_model_urls() -> None:
    """Every model API URL a sandboxed runtime is configured to call, checked as the MCP URL is when the host
    starts: one no sandbox could reach (remote plain http, an IPv6 or privileged loopback port, a password in
    it) would fail every session of its runtime at its first request; the host stops naming the setting."""
    from ..sandbox.egress import sandbox_reachable_url
    from .acp.settings import AcpSettings
    from .claude.settings import ClaudeSettings
    from .codex.settings import CodexSettings

    urls = [
        ("TREADLE_CODEX_BASE_URL", CodexSettings().base_url),
        ("TREADLE_CLAUDE_BASE_URL", ClaudeSettings().base_url),
    ]
    urls += [(f"TREADLE_ACP_AGENTS {name}: model_url", a.model_url) for name, a in AcpSettings().agents.items()]
    for what, url in urls:
        if url:
            sandbox_reachable_url(url, what)
