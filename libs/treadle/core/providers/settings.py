"""The settings a provider thread runs under, and when a run's settings are incompatible with them (L5.4).

A provider thread's earlier turns were reasoned under its model, its working directory and its permissions:
Codex keeps model-bound (encrypted) reasoning items in the history it replays, the files it saw and the paths
it named belong to that workspace, and what it assumed it may do follows from the runtime mode. Continuing such
a conversation under other settings would mislead the model, so a run that asks for other settings starts a
fresh provider thread from a full summary instead (or returns to an earlier thread that has its settings).
"""

from __future__ import annotations

from treadle.core.providers.model import ProviderThread, ProviderThreadSettings
from treadle.core.run.model import Run
from treadle.core.view import ThreadView


def of_run(state: ThreadView, run: Run) -> ProviderThreadSettings:
    """What ``run`` asks of its provider thread: its own model (the message's, else the thread's), the thread's
    runtime mode and workspace."""
    thread = state.thread
    assert thread is not None
    return ProviderThreadSettings(model=run.model, runtime_mode=thread.runtime_mode, workspace=thread.workspace)


def incompatibility(held: ProviderThreadSettings | None, wanted: ProviderThreadSettings) -> str | None:
    """Why a provider thread started under ``held`` cannot serve a run asking for ``wanted`` (None: it can).
    A thread whose settings were never recorded is taken as compatible: it predates the record."""
    if held is None:
        return None
    changed = [
        f"{name} {before or 'default'} -> {after or 'default'}"
        for name, before, after in (
            ("model", held.model, wanted.model),
            ("runtime mode", held.runtime_mode, wanted.runtime_mode),
            ("workspace", held.workspace, wanted.workspace),
        )
        if before != after
    ]
    return ", ".join(changed) or None


def fits(pth: ProviderThread, wanted: ProviderThreadSettings) -> bool:
    return incompatibility(pth.settings, wanted) is None
