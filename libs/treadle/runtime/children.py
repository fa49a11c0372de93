"""Child processes a worker spawns: they end when the worker ends, even when it is killed."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` making the child get ``sig`` (SIGTERM) when the spawning process dies, even by SIGKILL.

    Linux delivers PDEATHSIG when the spawning *thread* exits, so spawn from the event-loop
    thread, never from a short-lived worker thread.
    """
    if _libc is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        # The parent may have died between fork and prctl, in which case no signal will come.
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec
