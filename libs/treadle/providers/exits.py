"""What a runtime process that died says about itself, made fit for a run's error: its stderr is tracing
output with ANSI colour codes and unrelated warnings (a sandbox notice on every start), so only the last
error line is kept, and the exit status is named."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# A line worth showing says something failed; warnings and info lines are noise in a run's error.
_ERROR = re.compile(r"\b(error|fatal|panic(?:ked)?|failed|exception)\b", re.IGNORECASE)
_NOISE = re.compile(r"^\s*(?:\S+\s+)?(?:WARN(?:ING)?|INFO|DEBUG|TRACE)\b", re.IGNORECASE)
MAX_LINE = 300


def plain(text: str) -> str:
    """``text`` without terminal escape sequences."""
    return _ANSI.sub("", text).strip()


def relevant_line(lines: Iterable[str]) -> str | None:
    """The last line of ``lines`` that reports an error (not a warning), without colour codes."""
    found = None
    for raw in lines:
        line = plain(raw)
        if line and _ERROR.search(line) and not _NOISE.match(line):
            found = line
    if found is not None and len(found) > MAX_LINE:
        found = found[: MAX_LINE - 1] + "…"
    return found


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended a process: asyncio reports it as ``-N``, a shell (the sandbox's wrapper) as 128+N."""
    if returncode is None:
        return None
    return -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None


def exit_status(returncode: int | None) -> str:
    """``exited with code 1``, ``was killed by SIGKILL``."""
    if returncode is None:
        return "exited"
    signum = signal_of(returncode)
    if signum is not None:
        try:
            return f"was killed by {signal.Signals(signum).name}"
        except ValueError:
            pass
    return f"exited with code {returncode}"


def describe(runtime: str, returncode: int | None, stderr: Iterable[str]) -> str:
    """``codex app-server was killed by SIGKILL``, with the last error line of its stderr when it has one."""
    line = relevant_line(stderr)
    return f"{runtime} {exit_status(returncode)}" + (f": {line}" if line else "")
