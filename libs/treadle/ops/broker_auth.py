"""Who may connect to the broker, and what they may touch: the service account and one account per tenant
consumer credential, rendered into nats-server's own ``accounts`` block and applied with a config reload.

Why an account per credential: subject permissions see the subject a client publishes to, never the body
or the reply subject of its request. Inside the account that holds TREADLE_EVENTS a read-only credential
could still make the server publish anywhere in that account: a consumer whose create body sets
``deliver_subject`` (a push consumer) has the stream's events delivered there, and a pull request
(``CONSUMER.MSG.NEXT``) or any API request delivers its answer to whatever reply subject it names, onto
``treadle.cmd.…`` or a subject another stream captures (``treadle.prov.…``). So a credential lives in an
account of its own, and reaches the service account (``TREADLE``: the workers, JetStream) only through
exports made for it alone:

* ``$JS.API.CONSUMER.MSG.NEXT`` and ``…INFO`` of its one consumer (imported under ``treadle.js``: an account
  without JetStream answers ``$JS.API.>`` itself), and the acks of that consumer, as services. A service
  import maps the requester's reply subject to a private ``_R_.…`` one and routes the answers back into the
  requester's account, so a reply subject naming a worker subject lands in the tenant's own, empty account.
* ``treadle.evt.<tenant>.>`` as a stream (live subscription).

No consumer API that takes a body with a delivery target (CREATE) is exported: the operator creates the
credential's pull consumer with the service user (:mod:`treadle.ops.tenant_consumers`) and repositions
it on request. Revocation is a reload, after which the server closes the revoked user's connections at once
(bounded by the reload, not by a token lifetime); there is nothing to run besides nats-server itself (no
resolver, no callout service that every connection depends on). Passwords are stored as bcrypt hashes
only; the server verifies them itself. The user permissions stay an allow list as a second fence.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bcrypt
import msgspec

from treadle.core.ids import is_token

from ..eventlog.subjects import EVENTS_STREAM
from ..runtime import partitions
from .tenant_events import API_PREFIX, TenantCredential  # the document a tenant receives

SERVICE_USER = "treadle"
SERVICE_ACCOUNT = "TREADLE"  # holds JetStream and the workers; JetStream keeps its files under jetstream/TREADLE
_GLOBAL_ACCOUNT = "$G"  # where the service user lived before accounts (JetStream files under jetstream/$G)
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


def _consumer_api(verb: str, consumer: str) -> str:
    return f"$JS.API.CONSUMER.{verb}.{EVENTS_STREAM}.{consumer}"


def _acks(consumer: str) -> str:
    return f"$JS.ACK.{EVENTS_STREAM}.{consumer}.>"


def _local_api(subject: str) -> str:
    """Where the tenant's account sees an imported ``$JS.API.…`` subject."""
    return API_PREFIX + subject.removeprefix("$JS.API")


def tenant_permissions(tenant: str, consumer: str) -> dict[str, Any]:
    """Inside the credential's own account: pull from, inspect and ack its one consumer, and subscribe to
    ``treadle.evt.<tenant>.>`` and its own inboxes. Everything not allowed is denied (an allow list)."""
    return {
        "publish": {
            "allow": [
                _local_api(_consumer_api("INFO", consumer)),
                _local_api(_consumer_api("MSG.NEXT", consumer)),
                _acks(consumer),
            ]
        },
        "subscribe": {"allow": [f"treadle.evt.{tenant}.>", f"_INBOX_{consumer}.>"]},
    }


def service_exports(cred: ConsumerCredential) -> list[dict[str, Any]]:
    """What the service account offers one credential's account, and nobody else."""
    only = [cred.id]
    return [
        {"service": _consumer_api("INFO", cred.consumer), "accounts": only},
        # A pull request is answered by up to `batch` messages, so the route back must outlive the first.
        {"service": _consumer_api("MSG.NEXT", cred.consumer), "accounts": only, "response_type": "stream"},
        {"service": _acks(cred.consumer), "accounts": only},
        {"stream": f"treadle.evt.{cred.tenant}.>", "accounts": only},
    ]


def tenant_account(cred: ConsumerCredential) -> dict[str, Any]:
    """The credential's account: its one user and the imports matching :func:`service_exports`."""
    source = {"account": SERVICE_ACCOUNT}
    imports: list[dict[str, Any]] = [
        {
            "service": {**source, "subject": _consumer_api(verb, cred.consumer)},
            "to": _local_api(_consumer_api(verb, cred.consumer)),
        }
        for verb in ("INFO", "MSG.NEXT")
    ]
    imports.append({"service": {**source, "subject": _acks(cred.consumer)}})
    imports.append({"stream": {**source, "subject": f"treadle.evt.{cred.tenant}.>"}})
    return {
        "users": [
            {
                "user": cred.id,
                "password": cred.password_hash,
                "permissions": tenant_permissions(cred.tenant, cred.consumer),
            }
        ],
        "imports": imports,
    }


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(_COST)).decode()


class BrokerAuth:
    """The authorization state of one nats-server, kept in ``<server dir>/auth/``: the service user's
    password (0600), the tenant credentials (hashes only) and the rendered ``auth.conf``."""

    def __init__(self, server_dir: Path, default_partitions: int = partitions.DEFAULT_PARTITIONS) -> None:
        """``default_partitions``: the count a first render without ``TREADLE_PARTITIONS`` pins."""
        self.server_dir = Path(server_dir)
        self.dir = self.server_dir / AUTH_DIR
        self.default_partitions = default_partitions

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
        conf = self._conf(creds)  # first: a config that cannot be rendered must not leave a credential half made
        _write_private(self.dir / "tenants.json", msgspec.json.encode(creds))
        _write_private(self.server_dir / CONF, conf)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
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
        cred = ConsumerCredential(
            id=cred_id, tenant=tenant, password_hash=_hash(password), created_at=datetime.now(UTC).isoformat()
        )
        with self._locked():
            self._save([*self.credentials(), cred])
        return TenantCredential(
            url=url,
            user=cred_id,
            password=password,
            tenant=tenant,
            stream=EVENTS_STREAM,
            consumer=cred.consumer,
            inbox_prefix=cred.inbox_prefix,
            filter=f"treadle.evt.{tenant}.>",
            api_prefix=API_PREFIX,
        )

    def credential(self, cred_id: str) -> ConsumerCredential | None:
        return next((c for c in self.credentials() if c.id == cred_id), None)

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
        """Write ``auth.conf`` from the credentials kept."""
        path = self.server_dir / CONF
        _write_private(path, self._conf(self.credentials()))
        return path

    def _conf(self, creds: list[ConsumerCredential]) -> bytes:
        """``auth.conf``: the service account (its user may use every subject of it) exporting to each tenant
        credential's account what that credential may use. The file is what nats-server includes; JSON is
        valid NATS config syntax."""
        service = self.service()
        accounts: dict[str, dict[str, Any]] = {
            SERVICE_ACCOUNT: {
                "jetstream": "enabled",
                "users": [{"user": service.user, "password": _service_hash(self.dir, service.password)}],
                "exports": [export for cred in creds for export in service_exports(cred)],
                # thread partitions of the events (runtime/partitions.py), as many as when first rendered
                "mappings": partitions.nats_mappings(
                    partitions.pinned_count(self.dir / "partitions", self.default_partitions)
                ),
            }
        }
        for cred in creds:
            accounts[cred.id] = tenant_account(cred)
        text = (
            "# Generated by Treadle (treadle.ops.broker_auth); do not edit.\naccounts "
            + json.dumps(accounts, indent=2)
            + "\n"
        )
        return text.encode()

    def adopt_global_store(self, store_dir: Path | None = None) -> bool:
        """Before the first start with accounts: JetStream state the service user wrote while it lived in
        the global account (``jetstream/$G``) becomes the service account's (``jetstream/TREADLE``), so
        the streams survive the upgrade. Only while the server is stopped; True when something moved."""
        root = Path(store_dir or self.server_dir) / "jetstream"
        old, new = root / _GLOBAL_ACCOUNT, root / SERVICE_ACCOUNT
        if old.is_dir() and not new.exists():
            old.rename(new)
            return True
        return False

    def reload(self, timeout: float = 15.0) -> None:
        """Ask every running server that includes this ``auth.conf`` to re-read its configuration (SIGHUP) and
        wait until each says it did (one server, or the nodes of a cluster: ``_reload_once``).
        Connections of users that are gone are closed by the server during the reload.

        Twice when the configuration gained an account since the last reload: nats-server (2.15) resolves
        the service imports of an account that a reload ADDS against the exporting account as the new
        config describes it, not the live one, so a new credential's pull requests are answered 503 (no
        responders) until the next reload, which resolves them against the live account
        (tests/integration/test_broker_auth.py shows both). A revocation needs one."""
        accounts = {cred.id for cred in self.credentials()}
        loaded = self.dir / "reloaded-accounts.json"
        before = set(msgspec.json.decode(loaded.read_bytes(), type=list[str])) if loaded.is_file() else None
        self._reload_once(timeout)
        if before is None or not accounts <= before:
            self._reload_once(timeout)
        _write_private(loaded, msgspec.json.encode(sorted(accounts)))

    def _reload_once(self, timeout: float) -> None:
        """SIGHUP the single server of this directory, or every running node of a cluster (``node-<n>/`` below
        it, see :class:`~treadle.ops.servers.NatsCluster`); a node that is down reads the file when it starts."""
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
