"""Infrastructure errors of the event log, with a retry axis. Third-party errors are translated here."""

from __future__ import annotations


class LogError(Exception):
    retryable = True


class Conflict(LogError):
    """OCC fenced the append (err 10071 / 10201): another writer got there first, or this exact append
    already landed. Reload the thread, look for the command's receipt, decide again."""

    def __init__(self, actual_seq: int | None, description: str = "") -> None:
        super().__init__(description or f"wrong last sequence: {actual_seq}")
        self.actual_seq = actual_seq


class Unavailable(LogError):
    """The broker did not answer in time; the append may or may not have landed (reload to find out)."""


class Rejected(LogError):
    """The broker refused the append for a reason retrying will not fix (bad config, oversized message)."""

    retryable = False

    def __init__(self, code: int, description: str) -> None:
        super().__init__(f"{code}: {description}")
        self.code = code
