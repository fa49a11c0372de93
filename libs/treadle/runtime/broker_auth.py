"""Who may connect to the broker, and what they may touch: the service user and per-tenant consumer
credentials, rendered into nats-server's own authorization block (user permissions) and applied with a
config reload.

Why user permissions in the server config (and not accounts, JWTs or auth callout): one account keeps the
single TREADLE_EVENTS stream and the single-filter consumer API (``$JS.API.CONSUMER.CREATE.<stream>.
<name>.<filter>``) usable as is, with a permission per subject; revocation is a reload, after which the
server closes the revoked user's connections at once (bounded by the reload, not by a token lifetime); and
there is nothing to run besides nats-server itself (no resolver, no callout service that every connection
depends on). Passwords are stored as bcrypt hashes only; the server verifies them itself.

A consumer credential owns exactly one consumer name on TREADLE_EVENTS (its id): consumer names are one
flat namespace per stream, so a credential allowed ``CONSUMER.MSG.NEXT.<stream>.*`` could pull from the
workers' consumers. Its inbox prefix is its own (``_INBOX_<id>``) for the same reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

import bcrypt
import msgspec

from ..client.tenant_events import TenantCredential  # the document a tenant receives

from ..domain.ids import is_token
from ..eventlog.subjects import EVENTS_STREAM

SERVICE_USER = "treadle"
AUTH_DIR = "auth"
CONF = "auth.conf"
PID_FILE = "nats-server.pid"
LOG_FILE = "nats-server.log"
_RELOADED = b"Reloaded server configuration"
_COST = 10


class ConsumerCredential(msgspec.Struct, kw_only=True, frozen=True):
    """What the server needs to know about one tenant consumer credential (never the password)."""

    id: str  # user name, consumer name and inbox token at once
    tenant: str
    password_hash: str
    created_at: str

    @property
    def consumer(self) -> str:
        return self.id

    @property
    def inbox_prefix(self) -> str:
        return f"_INBOX_{self.id}"


class Service(msgspec.Struct, kw_only=True):
    user: str
    password: str


def tenant_permissions(tenant: str, consumer: str) -> dict:
    """Read-only access to ``treadle.evt.<tenant>.>``: live subscription and one single-filter pull
    consumer on TREADLE_EVENTS. Everything not allowed is denied (an allow list denies the rest)."""
    api = f"$JS.API.CONSUMER.{{}}.{EVENTS_STREAM}.{consumer}"
    return {
        "publish": {"allow": [
            api.format("CREATE") + f".treadle.evt.{tenant}.>",
            api.format("INFO"), api.format("DELETE"), api.format("MSG.NEXT"),
            f"$JS.ACK.{EVENTS_STREAM}.{consumer}.>",
        ]},
        "subscribe": {"allow": [f"treadle.evt.{tenant}.>", f"_INBOX_{consumer}.>"]},
    }


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(_COST)).decode()


class BrokerAuth:
    """The authorization state of one nats-server, kept in ``<server dir>/auth/``: the service user's
    password (0600), the tenant credentials (hashes only) and the rendered ``auth.conf``."""

    def __init__(self, server_dir: Path) -> None:
        self.server_dir = Path(server_dir)
        self.dir = self.server_dir / AUTH_DIR

    # --- service user ---------------------------------------------------------------------------

    def init(self, password: str | None = None) -> Service:
        """Set up a server directory for a deployment: the service user (with the operator's password, e.g.
        from a secret, or a generated one) and ``auth.conf``. Existing tenant credentials are kept."""
        service = Service(user=SERVICE_USER, password=password or secrets.token_urlsafe(24))
        _write_private(self.dir / "service.json", msgspec.json.encode(service))
        self.render()
        return service

    def service(self) -> Service:
        """The workers' credentials, created on first use and kept across restarts of the server."""
        path = self.dir / "service.json"
        if path.is_file():
            return msgspec.json.decode(path.read_bytes(), type=Service)
        self.dir.mkdir(parents=True, exist_ok=True)
        service = Service(user=SERVICE_USER, password=secrets.token_urlsafe(24))
        _write_private(path, msgspec.json.encode(service))
        return service

    # --- tenant credentials ---------------------------------------------------------------------

    def credentials(self) -> list[ConsumerCredential]:
        path = self.dir / "tenants.json"
        if not path.is_file():
            return []
        return msgspec.json.decode(path.read_bytes(), type=list[ConsumerCredential])

    def _save(self, creds: list[ConsumerCredential]) -> None:
        _write_private(self.dir / "tenants.json", msgspec.json.encode(creds))
        self.render()

    @contextlib.contextmanager
    def _locked(self):
        """One writer at a time (two operators issuing at once must not lose a credential)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def issue(self, tenant: str, url: str) -> TenantCredential:
        """A new consumer credential for ``tenant``; call :meth:`reload` for the server to accept it."""
        if not is_token(tenant):
            raise ValueError(f"tenant {tenant!r} is not a valid token ([A-Za-z0-9_-], 1..64 characters)")
        cred_id = "tc_" + secrets.token_hex(8)
        password = secrets.token_urlsafe(24)
        cred = ConsumerCredential(id=cred_id, tenant=tenant, password_hash=_hash(password),
                                  created_at=datetime.now(timezone.utc).isoformat())
        with self._locked():
            self._save([*self.credentials(), cred])
        return TenantCredential(url=url, user=cred_id, password=password, tenant=tenant, stream=EVENTS_STREAM,
                                consumer=cred.consumer, inbox_prefix=cred.inbox_prefix,
                                filter=f"treadle.evt.{tenant}.>")

    def revoke(self, cred_id: str) -> ConsumerCredential | None:
        """Forget a credential; returns it (or None when unknown). :meth:`reload` makes it take effect."""
        with self._locked():
            creds = self.credentials()
            found = next((c for c in creds if c.id == cred_id), None)
            if found is not None:
                self._save([c for c in creds if c.id != cred_id])
        return found

    # --- the server's view ----------------------------------------------------------------------

    def render(self) -> Path:
        """Write ``auth.conf``: the service user (all subjects) and every tenant credential with its
        permissions. The file is what nats-server includes; JSON is valid NATS config syntax."""
        service = self.service()
        users: list[dict] = [{"user": service.user, "password": _service_hash(self.dir, service.password)}]
        for cred in self.credentials():
            users.append({"user": cred.id, "password": cred.password_hash,
                          "permissions": tenant_permissions(cred.tenant, cred.consumer)})
        text = "# Generated by Treadle (treadle.runtime.broker_auth); do not edit.\nauthorization " + \
            json.dumps({"users": users}, indent=2) + "\n"
        path = self.server_dir / CONF
        _write_private(path, text.encode())
        return path

    def reload(self, timeout: float = 15.0) -> None:
        """Ask every running server that includes this ``auth.conf`` to re-read its configuration (SIGHUP)
        and wait until each says it did: the single server of this directory, or the nodes of a cluster
        (``node-<n>/`` below it, see :class:`~treadle.runtime.servers.NatsCluster`). A node that is down
        reads the new file when it starts. Connections of users that are gone are closed by the reload."""
        nodes = [d for d in (self.server_dir, *sorted(self.server_dir.glob("node-*"))) if (d / PID_FILE).is_file()]
        if not nodes:
            raise FileNotFoundError(f"no {PID_FILE} in {self.server_dir} or its node-* directories")
        running = [(d, pid) for d in nodes if _running_nats(pid := int((d / PID_FILE).read_text().strip()))]
        if not running:
            raise ProcessLookupError(f"no nats-server of {self.server_dir} is running")
        before = {d: _reloads(d) for d, _ in running}
        for _, pid in running:
            os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        for d, pid in running:
            while _reloads(d) <= before[d]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats-server (pid {pid}) did not confirm the reload within {timeout}s")
                time.sleep(0.02)  # polling the server's log file for its confirmation line


def _reloads(server_dir: Path) -> int:
    log = server_dir / LOG_FILE
    return log.read_bytes().count(_RELOADED) if log.is_file() else 0


def _running_nats(pid: int) -> bool:
    """A pid file outlives its server (a killed node leaves it behind), and the pid may be reused since."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists; let the signal say more
    try:
        return b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (not Linux): trust kill(0)


def _service_hash(auth_dir: Path, password: str) -> str:
    """The service password's bcrypt hash, computed once (bcrypt is slow on purpose)."""
    path = auth_dir / "service.hash"
    if path.is_file():
        stored = path.read_text().strip()
        if bcrypt.checkpw(password.encode(), stored.encode()):
            return stored
    hashed = _hash(password)
    _write_private(path, hashed.encode())
    return hashed


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
