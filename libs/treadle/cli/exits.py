"""The exit codes of ``treadle``, one per kind of outcome a script can act on (documented in docs/cli.md)."""

from __future__ import annotations

from ..client.errors import ApiError, Conflict, NotFound, RateLimited, Unavailable, Unreachable

OK = 0
FAILED = 1  # the API refused the request (400, 401, 403, 413, 422, 5xx) or an expected local failure
USAGE = 2  # the command line is wrong (argparse's own code)
NOT_FOUND = 3  # 404: no such thread, run, request, … for this tenant
CONFLICT = 4  # 409: the state does not allow it now (not sendable, not pending, not resumable)
UNAVAILABLE = 5  # no answer, 502/503/504, a rate limit or quota (429), or a timeout: try again later
NEEDS_INPUT = 6  # the run waits for an answer and input is off (--no-input) or stdin ended
RUN_NOT_COMPLETED = 7  # --wait: the run ended, but not completed (failed, interrupted, cancelled, rolled back)
INTERRUPTED = 130  # Ctrl-C

TABLE = (
    (OK, "success"),
    (FAILED, "the API refused the request (400, 401, 403, 413, 422, 5xx) or another expected failure"),
    (USAGE, "the command line is wrong"),
    (NOT_FOUND, "no such thread, run, request, node, plan or handoff (404)"),
    (CONFLICT, "the state does not allow it now: not sendable, not pending, not resumable (409)"),
    (UNAVAILABLE, "gateway unreachable or unavailable (502/503/504), rate limit or quota (429), or a timeout"),
    (NEEDS_INPUT, "the run waits for an answer to a runtime request and input is off (--no-input, stdin ended)"),
    (RUN_NOT_COMPLETED, "--wait: the run ended failed, interrupted, cancelled or rolled back"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


class NeedsInput(Exception):
    """A run waits for an answer the CLI may not ask for; the message says how to answer it."""


class RunNotCompleted(Exception):
    """A waited-for run ended, but not completed."""


def code_for(exc: BaseException) -> int:
    if isinstance(exc, NotFound):
        return NOT_FOUND
    if isinstance(exc, Conflict):
        return CONFLICT
    if isinstance(exc, (Unavailable, Unreachable, RateLimited, TimeoutError)):
        return UNAVAILABLE
    if isinstance(exc, NeedsInput):
        return NEEDS_INPUT
    if isinstance(exc, RunNotCompleted):
        return RUN_NOT_COMPLETED
    if isinstance(exc, ApiError):
        return FAILED
    return FAILED
