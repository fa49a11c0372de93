"""What the rollback tests share (checkpoint restores, L10.5's provider-native rollbacks): scripts whose runs
write files and then reply, running one to its end, and the files a workspace holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.support.api import Api
from tests.support.scripts import script

DONE = {"type": "text", "text": "done"}


def replying(*steps: dict[str, Any], profile: str | None = None) -> dict[str, Any]:
    """``steps``, then the reply "done"."""
    return script(*steps, DONE, profile=profile)


async def run_to_end(api: Api, thread: str, text: str, body: dict[str, Any]) -> dict[str, Any]:
    """The run of ``text`` with the script ``body``, once completed."""
    sent = await api.send(thread, text, script=body)
    return await api.wait_run(sent["run_id"])


def files(workspace: Path) -> dict[str, str]:
    """Every file of ``workspace`` but .git, with its text."""
    out = {}
    for d, dirs, names in os.walk(workspace):
        dirs[:] = [x for x in dirs if x != ".git"]
        for n in names:
            p = Path(d) / n
            out[str(p.relative_to(workspace))] = p.read_text()
    return out
