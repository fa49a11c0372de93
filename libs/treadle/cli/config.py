"""Where the CLI finds the stack: flags first, then the environment (TREADLE_API_URL, TREADLE_TOKEN, …), then the
files ``treadle up`` leaves in its state directory."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

from ..client import AsyncTreadle
from ..runtime import broker_urls
from .errors import UsageError

DEFAULT_API = "http://127.0.0.1:8700"
DEV_TENANT = DEV_USER = "dev"


def state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("TREADLE_STATE_DIR") or ".treadle")


def setting(flag: str | None, env: str, args: argparse.Namespace, file: str) -> str | None:
    if flag:
        return flag
    if os.environ.get(env):
        return os.environ[env]
    path = state_dir(args) / file
    return path.read_text().strip() if path.is_file() else None


def api_client(args: argparse.Namespace) -> AsyncTreadle:
    api = setting(args.api, "TREADLE_API_URL", args, "api-url") or DEFAULT_API
    token = setting(args.token, "TREADLE_TOKEN", args, "dev-token")
    if not token:
        raise UsageError(
            "no API token: pass --token, set TREADLE_TOKEN, or run `treadle up` (it writes "
            f"{state_dir(args) / 'dev-token'})"
        )
    return AsyncTreadle(api, token)


def nats_url(args: argparse.Namespace) -> str:
    # No fallback to nats://127.0.0.1:4222: that may well be somebody else's NATS.
    url = setting(args.nats_url, "TREADLE_NATS_URL", args, "nats-url")
    if not url:
        raise UsageError("no NATS URL: pass --nats-url, set TREADLE_NATS_URL, or run `treadle up`")
    return url


def _redacted(url: str) -> str:
    """The URL without its password (the service user's URL is what `treadle up` leaves behind)."""
    return re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", url)


@contextlib.asynccontextmanager
async def connect_nats(url: str) -> AsyncIterator[NATS]:
    import nats

    async def quiet(exc: Exception) -> None:  # connect() raises; no need to also log every attempt
        pass

    try:
        options = broker_urls.parse(url).connect_options()  # a cluster's URL lists every node
        if user := os.environ.get("TREADLE_NATS_USER"):  # the service credentials, as the workers take them
            options.update(user=user, password=os.environ.get("TREADLE_NATS_PASSWORD"))
        # nats-py 2.16 retries an unreachable server forever when allow_reconnect=False; one attempt fails fast.
        nc = await asyncio.wait_for(
            nats.connect(
                **options,
                connect_timeout=3,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                error_cb=quiet,
                name="treadle-cli",
            ),
            10,
        )
    except Exception as exc:
        raise UsageError(f"cannot connect to NATS at {_redacted(url)}: {exc or exc.__class__.__name__}") from None
    try:
        yield nc
    finally:
        await nc.close()
