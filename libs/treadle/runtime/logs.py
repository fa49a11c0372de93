"""Logging: one line per record, text for people or JSON for machines.

Every line carries an ISO-8601 UTC timestamp, and, while a piece of work about a run is being handled, the
ids of what it is about (tenant, thread, run, attempt): the edges that receive work (consumer handlers, the
gateway's requests) bind them with ``bound(...)`` in a context variable, so every log call below them,
and every task they start, says which thread and run it is about without passing ids around. While tracing is
on, a line written under a span carries its trace and span ids too. A line may add named fields of its own
(``extra=fields(...)``: the access log's status and duration, a run transition's event and reason).

Every library's lines (uvicorn, mcp, nats, redis, …) go through the one handler on the root logger, in the same
format: ``setup`` takes the handlers other code installed off their loggers, so nothing prints on its own."""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import math
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from ..eventlog import tracing
from ..eventlog.story import FIELDS_KEY

IDS = ("tenant", "thread", "run", "attempt")
BOUND = (*IDS, "request")  # the gateway binds the request id too
_ids: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("treadle_log_ids", default=None)


@contextlib.contextmanager
def bound(**ids: str | int | None) -> Iterator[None]:
    """Within the block, log lines carry these ids (added to those already bound; None leaves one out)."""
    merged = {**(_ids.get() or {}), **{k: str(v) for k, v in ids.items() if v is not None and k in BOUND}}
    token = _ids.set(merged)
    try:
        yield
    finally:
        _ids.reset(token)


class _RunIds(msgspec.Struct):
    run_id: str | None = None
    attempt_id: str | None = None


class _Ids(msgspec.Struct):
    """The ids in an event envelope or a command (JSON): whatever it lacks stays out; the rest is skipped."""

    tenant: str | None = None
    thread: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    attempt_id: str | None = None
    data: _RunIds | None = None


_ids_decoder = msgspec.json.Decoder(_Ids)


def ids_of(payload: bytes) -> dict[str, str | None]:
    """The tenant/thread/run/attempt a message is about, for ``bound(**ids_of(msg.data))`` at a handler's edge."""
    try:
        found = _ids_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}
    data = found.data or _RunIds()
    return {
        "tenant": found.tenant,
        "thread": found.thread or found.thread_id,
        "run": data.run_id or found.run_id,
        "attempt": data.attempt_id or found.attempt_id,
    }


def fields(**named: str | int | float | None) -> dict[str, Any]:
    """``extra=`` for a log call: named fields the line carries (None leaves one out)."""
    return {FIELDS_KEY: {k: v for k, v in named.items() if v is not None}}


def _fields(record: logging.LogRecord) -> tuple[dict[str, str], dict[str, Any]]:
    """The ids of a line (those bound, then those it names itself) and its other named fields."""
    found = getattr(record, FIELDS_KEY, None)
    named = found if isinstance(found, dict) else {}
    ids = {**(_ids.get() or {}), **{k: str(v) for k, v in named.items() if k in BOUND}}
    return ids, {k: v for k, v in named.items() if k not in BOUND}


def current() -> dict[str, str]:
    return dict(_ids.get() or {})


_second: list[Any] = [None, ""]  # the last whole second formatted, and its text up to the milliseconds


def utc_iso(created: float) -> str:
    """``2026-12-04T10:19:29.123Z``: ISO-8601, UTC, milliseconds (the date and time part is formatted once a
    second: lines come in bursts)."""
    second = math.floor(created)
    micros = round((created - second) * 1e6)  # as datetime.fromtimestamp rounds
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    if _second[0] != second:
        _second[:] = [second, datetime.datetime.fromtimestamp(second, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.")]
    return f"{_second[1]}{micros // 1000:03d}Z"


class _JsonFormatter(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        ids, extra = _fields(record)
        entry = {
            "at": utc_iso(record.created),
            "level": record.levelname,
            "worker": self._worker,
            "logger": record.name,
            **ids,
            **tracing.current_ids(),
            **extra,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


class _TextFormatter(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__(f"%(at)s %(levelname)s {worker} %(name)s:%(ids)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.at = utc_iso(record.created)
        ids, extra = _fields(record)
        named = {**{k: ids[k] for k in BOUND if k in ids}, **tracing.current_ids()}
        record.ids = "".join(f" {k}={v}" for k, v in named.items())
        line = super().format(record)
        if extra:
            line += " |" + "".join(f" {k}={v}" for k, v in extra.items())
        return line


def setup(worker: str, level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter(worker) if fmt == "json" else _TextFormatter(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # No format here prints the caller's file and line, the thread or the process: skip finding them per record.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.getLogger("nats").setLevel(logging.WARNING)
    adopt_library_loggers()


def adopt_library_loggers() -> None:
    """Every logger but the root loses the handlers a library gave it and passes its lines up to the root's one
    handler, in this module's format (uvicorn's own config is not loaded: the gateway passes it none)."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.handlers:
            logger.handlers.clear()
            logger.propagate = True
