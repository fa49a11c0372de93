"""Where a webhook may be sent. A URL is http or https without userinfo; every address its host resolves to is
checked at connect time (the connection goes to the checked address, never a second lookup), so a name that
resolves to a private address later (DNS rebinding) is refused then as well as at registration. By default
no private, loopback, link-local, multicast, reserved or unspecified address; the operator's allow-list opens
host names or CIDRs (``TREADLE_WEBHOOKS_ALLOW_HOSTS``)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL = 2048
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeTarget(ValueError):
    """The URL or an address it resolves to may not receive webhooks."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written (lower case), without brackets
    port: int
    path: str  # path and query, at least "/"


@dataclass(frozen=True)
class AllowList:
    hosts: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        hosts: set[str] = set()
        networks = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks))

    def opens(self, host: str, address: IPAddress) -> bool:
        return host in self.hosts or any(address.version == n.version and address in n for n in self.networks)


def parse_url(url: str) -> Target:
    """The target of a webhook URL; raises :class:`UnsafeTarget` for anything but plain http(s)."""
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise UnsafeTarget("the URL is too long or holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"the URL does not parse: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UnsafeTarget("the URL's scheme must be http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UnsafeTarget("the URL may not carry a user or password")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeTarget("the URL has no host")
    if parts.fragment:
        raise UnsafeTarget("the URL may not have a fragment")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path)


def refused_because(address: IPAddress) -> str | None:
    """Why ``address`` may not receive webhooks by default, or None. An IPv4-mapped (::ffff:a.b.c.d) or
    NAT64/6to4 form is judged by the IPv4 address inside it."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in ipaddress.ip_network("64:ff9b::/96"):
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return refused_because(inner)
    for name in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if not address.is_global:
        return "not global"
    return None


def check(host: str, address: IPAddress, allow: AllowList) -> None:
    if allow.opens(host, address):
        return
    if (why := refused_because(address)) is not None:
        raise UnsafeTarget(f"{host} resolves to a {why} address ({address}), which may not receive webhooks")


def literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now (a literal resolves to itself, without a lookup)."""
    import asyncio

    if (ip := literal(host)) is not None:
        return [ip]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UnsafeTarget(f"{host} does not resolve: {exc}") from None
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in found:
            found.append(ip)
    return found


async def checked_addresses(target: Target, allow: AllowList) -> list[IPAddress]:
    """The addresses to connect to: all of them checked, or :class:`UnsafeTarget` if any is refused (a name
    with one private answer among public ones is refused whole: the resolver may hand out either)."""
    addresses = await resolve(target.host, target.port)
    if not addresses:
        raise UnsafeTarget(f"{target.host} resolves to no address")
    for address in addresses:
        check(target.host, address, allow)
    return addresses
