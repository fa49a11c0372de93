"""What orchestration may know of the providers a deployment has: given to the core as data.

The core never names a provider. The providers package declares each one (``treadle.providers.registry``):
its name, or for a family such as ACP agents a prefix every member's name starts with, and the grammar of its
turn options (a message's ``script``). A decision gets the catalogue in its context (``Ctx.providers``) and
asks it: is this provider known, may it take these turn options, what capability profile does a played
script ask for before any session exists, which turn options make a delegated turn a planning one.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from treadle.core.providers.model import ProviderCapabilities
from treadle.core.script import parse_script

FAMILY_MEMBER = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")  # what follows a family's prefix (an agent's name)

# none: a message may carry no turn options for it. script: they are a script the provider plays
# (core/script.py), which may ask for a capability profile. options: named options, each from its values.
TurnOptionsKind = Literal["none", "script", "options"]


class ProviderSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # the provider's name; for a family, the prefix of its members' names ("prefix" + member)
    family: bool = False
    member: str = "name"  # what a family's member is called, in a refusal that lists the choices
    turn_options: TurnOptionsKind = "none"
    options: dict[str, tuple[str, ...]] = {}  # turn_options="options": option -> the values it takes
    plan: dict[str, str] = {}  # the turn options that make a turn a planning one (a task delegated as "plan")

    def names(self, name: str) -> bool:
        if self.family:
            return name.startswith(self.name) and FAMILY_MEMBER.fullmatch(name[len(self.name) :]) is not None
        return name == self.name


class Catalogue(msgspec.Struct, frozen=True):
    """The providers a decision may name. Empty: it knows none, and every decision that needs one refuses."""

    providers: tuple[ProviderSpec, ...] = ()

    def spec(self, name: str) -> ProviderSpec | None:
        return next((p for p in self.providers if p.names(name)), None)

    def known(self, name: str) -> bool:
        return self.spec(name) is not None

    @property
    def choices(self) -> str:
        """The names a refusal lists (a family as ``prefix<name>``)."""
        return ", ".join(f"{p.name}<{p.member}>" if p.family else p.name for p in self.providers)

    def check_turn_options(self, provider: str, raw: dict[str, Any]) -> None:
        """Raises ``ValueError`` with a readable reason when ``provider`` cannot take ``raw``."""
        spec = self.spec(provider)
        kind = spec.turn_options if spec is not None else "none"
        if kind == "script":
            parse_script(raw)
        elif kind == "options" and spec is not None:
            unknown = sorted(set(raw) - set(spec.options))
            if unknown:
                raise ValueError(
                    f"{provider} turn options: unknown {', '.join(unknown)} (known: {', '.join(spec.options)})"
                )
            for option, values in spec.options.items():
                value = raw.get(option)
                if value is not None and value not in values:
                    raise ValueError(f"{provider} turn options: {option} must be {' or '.join(values)}, not {value!r}")
        else:
            raise ValueError(f"provider {provider} takes no script")

    def plays_scripts(self, provider: str) -> bool:
        spec = self.spec(provider)
        return spec is not None and spec.turn_options == "script"

    def script_capabilities(self, provider: str, raw: dict[str, Any] | None) -> ProviderCapabilities | None:
        """The capability profile a played script asks for; None for a provider that plays none (it declares
        its capabilities when its session starts)."""
        if not self.plays_scripts(provider):
            return None
        script = parse_script(raw)
        return script.capabilities if script is not None else None

    def plan_options(self, provider: str) -> dict[str, str]:
        """The turn options a turn of ``provider`` plans with (empty: it plans no differently)."""
        spec = self.spec(provider)
        return dict(spec.plan) if spec is not None else {}
