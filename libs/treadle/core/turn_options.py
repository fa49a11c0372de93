"""What a message's ``script`` may carry, per provider.

For the scripted provider it is a script to play (see script.py); for Codex it carries turn options
(``{"collaboration_mode": "plan"}``, played by the Codex adapter); other providers take none. Checked when
a message is accepted, so a bad option is a 400 and never a run that fails later.
"""

from __future__ import annotations

from typing import Any

from treadle.core.providers.model import ProviderCapabilities
from treadle.core.script import parse_script

CODEX_COLLABORATION_MODES = ("plan", "default")
SCRIPTED_PROVIDERS = ("scripted", "scripted-b")  # one adapter under two names, to test switching (L5)


def check_turn_options(provider: str, raw: dict[str, Any]) -> None:
    """Raises ``ValueError`` with a readable reason when ``provider`` cannot take ``raw``."""
    if provider in SCRIPTED_PROVIDERS:
        parse_script(raw)
    elif provider == "codex":
        unknown = sorted(set(raw) - {"collaboration_mode"})
        if unknown:
            raise ValueError(f"codex turn options: unknown {', '.join(unknown)} (known: collaboration_mode)")
        mode = raw.get("collaboration_mode")
        if mode is not None and mode not in CODEX_COLLABORATION_MODES:
            raise ValueError(
                f"codex turn options: collaboration_mode must be {' or '.join(CODEX_COLLABORATION_MODES)}, not {mode!r}"
            )
    else:
        raise ValueError(f"provider {provider} takes no script")


def scripted_capabilities(provider: str, raw: dict[str, Any] | None) -> ProviderCapabilities | None:
    """The capability profile a scripted run's script asks for; None for any other provider."""
    if provider not in SCRIPTED_PROVIDERS:
        return None
    script = parse_script(raw)
    return script.capabilities if script is not None else None
