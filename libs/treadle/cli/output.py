"""``--output text|json``: every command prints either for people (rich) or one JSON document on stdout (JSON
lines for streams), so scripts parse what they get without scraping tables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode


def as_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"


def builtins(value: Any) -> Any:
    """A view, a page's items or an answer as plain JSON types (what the renderers and JSON output use)."""
    return msgspec.to_builtins(value)


def json_line(value: Any) -> None:
    sys.stdout.write(_encode(builtins(value)).decode() + "\n")
    sys.stdout.flush()


def emit(args: argparse.Namespace, value: Any, human: Callable[[Any], None]) -> None:
    """``value`` as JSON with --output json, else ``human(its plain-JSON form)``."""
    if as_json(args):
        json_line(value)
    else:
        human(builtins(value))
