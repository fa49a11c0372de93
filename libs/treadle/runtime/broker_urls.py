"""A broker URL as Treadle spells it: one ``nats://[user:password@]host:port`` or, for a cluster, several of
them separated by commas (the convention of the NATS tools). Every connection is made from the whole list,
so a client starts on, and fails over to, any node.

Credentials are taken out of the URLs and passed as connect options: nats-py authenticates with the
credentials of the URL it happens to dial, and the servers a cluster announces (its ``connect_urls``) carry
none, so a client that failed over to a discovered node would otherwise be refused there.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit


class BrokerUrls(NamedTuple):
    servers: list[str]  # without credentials
    user: str | None
    password: str | None

    @property
    def address(self) -> str:
        """The comma-separated list without credentials (what may be shown or handed to a tenant)."""
        return ",".join(self.servers)

    def connect_options(self) -> dict[str, Any]:
        """``servers`` and, when the URLs carried them, ``user``/``password`` for ``nats.connect``."""
        options: dict[str, Any] = {"servers": self.servers}
        if self.user is not None:
            options.update(user=self.user, password=self.password)
        return options


def parse(url: str) -> BrokerUrls:
    """Split ``url`` into its servers and the one set of credentials they share. Raises ValueError for an
    empty list or servers that disagree on their credentials (which one would be meant?)."""
    servers: list[str] = []
    credentials: set[tuple[str | None, str | None]] = set()
    for part in (p.strip() for p in url.split(",")):
        if not part:
            continue
        parts = urlsplit(part if "://" in part else f"nats://{part}")
        if not parts.hostname:
            raise ValueError(f"no host in broker URL {part!r}")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        netloc = host + (f":{parts.port}" if parts.port else "")
        servers.append(urlunsplit(parts._replace(netloc=netloc)))
        user = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        if user is not None:
            credentials.add((user, password))
    if not servers:
        raise ValueError(f"no server in broker URL {url!r}")
    if len(credentials) > 1:
        raise ValueError("the servers of a broker URL carry different credentials")
    user, password = next(iter(credentials), (None, None))
    return BrokerUrls(servers, user, password)


def address(url: str) -> str:
    """``url`` without its credentials."""
    return parse(url).address
