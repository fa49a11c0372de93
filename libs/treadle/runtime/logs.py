"""Logging: one line per record, text for people or JSON for machines."""

from __future__ import annotations

import logging
import sys

import msgspec


class _JsonFormatter(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "at": self.formatTime(record),
            "level": record.levelname,
            "worker": self._worker,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


def setup(worker: str, level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter(worker))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {worker} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
