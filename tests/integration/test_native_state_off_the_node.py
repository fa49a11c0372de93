"""Issue 35: a provider's resume state packed from a hostile runtime's home, kept in the Object Store and put
back. Packing never follows a link; a restore writes only regular files inside its target and refuses any
member that is a link, a device, absolute or climbs out with ``..``; a store that does not answer never fails
the turn that wanted to keep the state."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import nats
import pytest

from treadle.checkpoints.archive import JetStreamArchive
from treadle.eventlog import streams
from treadle.eventlog.subjects import InvalidToken
from treadle.ops.servers import NatsServer
from treadle.provider_host.native_states import NativeStates, object_name
from treadle.providers.acp import AcpAdapter, AcpAgent, AcpSettings
from treadle.providers.base import ProviderAdapter, Turn, TurnSink
from treadle.providers.claude import ClaudeAdapter
from treadle.providers.claude.settings import ClaudeSettings
from treadle.providers.codex import CodexAdapter, CodexSettings
from treadle.providers.native_state import NativeFiles, NativeStateRefused, members, pack, restore, walk
from treadle.providers.protocol import PlaceSession
from treadle.runtime.metrics import NATIVE_STATE

THREAD = "01a24e98-66ec-7310-abfd-7999311475fc"
ROLLOUT = f"sessions/2026/12/07/rollout-2026-12-07T03-41-11-{THREAD}.jsonl"


def tar_of(*entries: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info in entries:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return gzip.compress(out.getvalue())


def member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_a_packed_state_restores_byte_for_byte_and_the_same_files_pack_to_the_same_bytes(tmp_path):
    home = tmp_path / "home"
    (home / "sessions/2026/12/07").mkdir(parents=True)
    (home / ROLLOUT).write_bytes(b'{"a": 1}\n' * 1000)
    packed = pack(home, [ROLLOUT])
    os.utime(home / ROLLOUT, (0, 12345))  # times and owners are not kept: an unchanged file packs the same
    assert pack(home, [ROLLOUT]) == packed
    restore(tmp_path / "elsewhere", members(packed))
    assert (tmp_path / "elsewhere" / ROLLOUT).read_bytes() == (home / ROLLOUT).read_bytes()


def test_packing_never_follows_a_link_the_runtime_planted(tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("the host's own file")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "deep.jsonl").write_text("outside the home")
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    (home / "sessions" / "a.jsonl").write_text("mine")
    os.symlink(secret, home / "sessions" / "b.jsonl")  # a link to a file outside
    os.symlink(tmp_path / "outside", home / "sessions" / "linked")  # a link to a directory outside
    assert walk(home / "sessions") == ["a.jsonl"]
    packed = members(pack(home, ["sessions/a.jsonl", "sessions/b.jsonl", "sessions/linked/deep.jsonl"]))
    assert packed == {"sessions/a.jsonl": b"mine"}


def test_packing_is_bounded(tmp_path):
    (tmp_path / "big").write_bytes(b"0" * 2048)
    with pytest.raises(NativeStateRefused):
        pack(tmp_path, ["big"], max_bytes=1024)


@pytest.mark.parametrize(
    "hostile",
    [
        member("../escaped.jsonl"),
        member("sessions/../../escaped.jsonl"),
        member("/tmp/escaped.jsonl"),
        member("sessions/link.jsonl", tarfile.SYMTYPE, "/etc/passwd"),
        member("sessions/hard.jsonl", tarfile.LNKTYPE, "/etc/passwd"),
        member("sessions/dev", tarfile.CHRTYPE),
        member("sessions/fifo", tarfile.FIFOTYPE),
        member("sessions", tarfile.DIRTYPE),  # only files: directories are made as their paths need
    ],
    ids=["dotdot", "inner-dotdot", "absolute", "symlink", "hardlink", "device", "fifo", "directory"],
)
def test_a_hostile_member_is_refused_and_nothing_is_written(tmp_path, hostile):
    data = tar_of(member("sessions/fine.jsonl"), hostile)
    with pytest.raises(NativeStateRefused):
        restore(tmp_path / "target", members(data))
    assert not (tmp_path / "target").exists()
    assert not (tmp_path / "escaped.jsonl").exists()


def test_a_decompression_bomb_stops_at_the_bound(tmp_path):
    data = tar_of(member("sessions/zeros.jsonl"), data=b"\0" * (4 * 1024 * 1024))
    assert len(data) < 64 * 1024
    with pytest.raises(NativeStateRefused):
        members(data, max_bytes=1024 * 1024)
    with pytest.raises(NativeStateRefused):
        members(b"not gzip at all")


def test_a_restore_does_not_write_through_a_link_already_in_the_target(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "home"
    target.mkdir()
    os.symlink(outside, target / "sessions")  # planted by the runtime before the node lost the state
    with pytest.raises(NativeStateRefused):
        restore(target, {"sessions/x.jsonl": b"data"})
    assert list(outside.iterdir()) == []
    (target / "sessions").unlink()
    (target / "sessions").mkdir()
    os.symlink(tmp_path / "victim", target / "sessions" / "x.jsonl")  # a link where the file goes: replaced
    restore(target, {"sessions/x.jsonl": b"data"})
    assert not (tmp_path / "victim").exists()
    assert (target / "sessions" / "x.jsonl").read_bytes() == b"data" and not (target / "sessions/x.jsonl").is_symlink()


@pytest.mark.parametrize(
    ("tenant", "provider", "pth"),
    [("../acme", "codex", "pth_1"), ("acme", "co/dex", "pth_1"), ("acme", "codex", "a.b")],
)
def test_every_token_of_an_object_name_is_checked(tenant, provider, pth):
    with pytest.raises(InvalidToken):
        object_name(tenant, provider, pth)


# --- the Codex adapter's restore -------------------------------------------------------------------------


@pytest.fixture
def codex_home_root():
    root = Path.home() / ".cache" / "treadle-test" / "native-state" / uuid.uuid4().hex[:12]  # not under /tmp
    yield root
    shutil.rmtree(root, ignore_errors=True)


def codex(workspace: Path, home_root: Path) -> CodexAdapter:
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id="pth_1",
        native_ref=THREAD, workspace=str(workspace),
    )  # fmt: skip
    return CodexAdapter(workspace, request, workspace.parent / "runtime" / "ps_1", CodexSettings(home_root=home_root))


def fetching(data: bytes | None) -> Callable[[], Awaitable[dict[str, bytes] | None]]:
    """What the host's fetch gives for ``data`` kept as an earlier release's single tar."""

    async def fetch() -> dict[str, bytes] | None:
        return None if data is None else members(data)

    return fetch


async def test_codex_restores_only_the_threads_own_rollout_and_only_when_it_is_missing(tmp_path, codex_home_root):
    adapter = codex(tmp_path, codex_home_root)
    other = ROLLOUT.replace(THREAD, "01a24e98-6c7d-79d1-908d-dc3b81c2873e")
    for stray in ("config.toml", other, "sessions/2026/12/07/notes.txt"):
        with pytest.raises(NativeStateRefused):
            await adapter.restore_native_state(THREAD, fetching(tar_of(member(ROLLOUT), member(stray))))
    assert walk(codex_home_root / "acme" / "sessions") == []
    with pytest.raises(ValueError):
        await adapter.restore_native_state("../" + THREAD, fetching(tar_of(member(ROLLOUT))))
    assert await adapter.restore_native_state(THREAD, fetching(None)) is False  # nothing kept: nothing done
    assert await adapter.restore_native_state(THREAD, fetching(tar_of(member(ROLLOUT), data=b"kept"))) is True
    assert (codex_home_root / "acme" / ROLLOUT).read_bytes() == b"kept"

    async def never() -> dict[str, bytes] | None:
        raise AssertionError("the archive is not read when the node has the rollout")

    assert await adapter.restore_native_state(THREAD, never) is False


# --- the host's keeping, on a real Object Store ----------------------------------------------------------


class Holding(ProviderAdapter):
    """An adapter whose native state is the file ``state`` under ``home``, when the test wrote it."""

    name = "holding"

    def __init__(self, home: Path) -> None:
        super().__init__(Path("."))
        self.home = home
        home.mkdir(parents=True, exist_ok=True)

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        return fresh_ref, False

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        return None

    async def native_state(self) -> NativeFiles | None:
        return NativeFiles(self.home, ("state",)) if (self.home / "state").exists() else None

    def write(self, data: bytes) -> None:
        (self.home / "state").write_bytes(data)


def outcome(label: str) -> float:
    return NATIVE_STATE.labels(label)._value.get()


async def test_state_is_stored_when_it_changed_and_an_outage_does_not_fail_the_turn(tmp_path, codex_home_root):
    server = NatsServer(tmp_path / "nats", auth=False)
    await server.start()
    nc = await nats.connect(server.url, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    try:
        await streams.ensure(nc.jetstream())
        archive = JetStreamArchive(nc.jetstream(), timeout=2.0)
        request = PlaceSession(
            tenant="acme", thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id="pth_1",
            workspace="ws",
        )  # fmt: skip
        name = object_name("acme", "codex", "pth_1")
        keeper, adapter = NativeStates(archive), Holding(tmp_path / "home")
        await keeper.keep(request, adapter)  # nothing to keep
        assert await archive.get(name) is None
        adapter.write(b"one")
        stored, unchanged = outcome("stored"), outcome("unchanged")
        await keeper.keep(request, adapter)
        await keeper.keep(request, adapter)
        assert await keeper.fetch(name) == {"state": b"one"}
        assert (outcome("stored"), outcome("unchanged")) == (stored + 1, unchanged + 1)
        await NativeStates(archive).keep(request, adapter)  # a restarted host checks the file against the kept
        assert (outcome("stored"), outcome("unchanged")) == (stored + 1, unchanged + 2)
        assert await keeper.fetch(name) == {"state": b"one"}

        adapter.write(b"two")
        failed = outcome("store_failed")
        await server.stop()
        await keeper.keep(request, adapter)  # returns: logged and counted, never raised
        assert outcome("store_failed") == failed + 1
        restore_failed = outcome("restore_failed")
        resuming = msgspec.structs.replace(request, native_ref=THREAD)
        await keeper.restore(resuming, codex(tmp_path, codex_home_root))  # the node lacks it; the archive is down
        assert outcome("restore_failed") == restore_failed + 1
    finally:
        await nc.close()
        await server.stop()


# --- Claude Code and ACP agents -----------------------------------------------------------------------------

SESSION = "5b0c9a36-3f43-4d0e-9a43-4f0d8d1f2a11"
TRANSCRIPT = f"projects/-srv-ws-acme-thr_1/{SESSION}.jsonl"


def claude(workspace: Path, threads: Path) -> ClaudeAdapter:
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="claude", session_id="ps_1", provider_thread_id="pth_1",
        native_ref=SESSION, workspace=str(workspace),
    )  # fmt: skip
    return ClaudeAdapter(workspace, request, workspace / "runtime" / "ps_1", ClaudeSettings(threads_dir=threads))


async def test_claude_restores_only_the_sessions_transcript_and_records(tmp_path):
    adapter = claude(tmp_path, tmp_path / "threads")
    other = TRANSCRIPT.replace(SESSION, str(uuid.uuid4()))
    for stray in (other, "forks/other.json", "projects/../x.jsonl", "settings.json", f"forks/{SESSION}.json"):
        with pytest.raises((NativeStateRefused, ValueError)):
            await adapter.restore_native_state(SESSION, fetching(tar_of(member(TRANSCRIPT), member(stray))))
    with pytest.raises(NativeStateRefused):  # records without a transcript resume nothing
        await adapter.restore_native_state(SESSION, fetching(tar_of(member(f"forks/{SESSION}.ended.json"))))
    assert walk(tmp_path / "threads") == []
    kept = tar_of(member(TRANSCRIPT), member(f"forks/{SESSION}.ended.json"), data=b"{}")
    assert await adapter.restore_native_state(SESSION, fetching(kept)) is True
    assert sorted(walk(tmp_path / "threads" / "acme")) == [f"forks/{SESSION}.ended.json", TRANSCRIPT]
    assert await adapter.restore_native_state(SESSION, fetching(kept)) is False  # the node has it now
    adapter.session_id = SESSION
    native = await adapter.native_state()
    assert native is not None and sorted(native.files) == [f"forks/{SESSION}.ended.json", TRANSCRIPT]


async def test_an_acp_home_is_restored_only_where_there_is_none_and_never_outside_it(tmp_path):
    settings = AcpSettings(agents={"agent": AcpAgent(command=["/bin/true"])}, home_root=tmp_path / "homes")
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="acp-agent", session_id="ps_1", provider_thread_id="pth_1",
        native_ref="sess-1", workspace=str(tmp_path),
    )  # fmt: skip
    adapter = AcpAdapter(tmp_path, request, tmp_path / "runtime" / "ps_1", settings)
    with pytest.raises(NativeStateRefused):
        await adapter.restore_native_state("sess-1", fetching(tar_of(member("ok.json"), member("../../escaped"))))
    assert not (tmp_path / "escaped").exists() and not adapter.home().exists()
    assert await adapter.restore_native_state("sess-1", fetching(tar_of(member("sessions/s.json")))) is True
    assert (adapter.home() / "sessions" / "s.json").read_bytes() == b"x"
    assert await adapter.restore_native_state("sess-1", fetching(tar_of(member("sessions/t.json")))) is False


async def test_a_state_grown_past_its_bound_drops_the_kept_one_so_no_older_conversation_is_resumed(tmp_path):
    server = NatsServer(tmp_path / "nats", auth=False)
    await server.start()
    nc = await nats.connect(server.url)
    try:
        await streams.ensure(nc.jetstream())
        archive = JetStreamArchive(nc.jetstream(), timeout=5.0)
        request = PlaceSession(
            tenant="acme", thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id="pth_1",
            workspace="ws",
        )  # fmt: skip
        adapter = Holding(tmp_path / "home")
        adapter.write(b"0" * 1024)
        keeper = NativeStates(archive, max_bytes=2048)
        await keeper.keep(request, adapter)
        assert await archive.get(object_name("acme", "codex", "pth_1")) is not None
        with (tmp_path / "home" / "state").open("ab") as grown:
            grown.write(b"0" * 4096)
        await keeper.keep(request, adapter)  # refused as too large: never raised
        assert await archive.get(object_name("acme", "codex", "pth_1")) is None
        assert await archive.get(object_name("acme", "codex", "pth_1") + "/0") is None
    finally:
        await nc.close()
        await server.stop()
