"""Issue 35: a provider thread's native state kept as segments plus a manifest, on a real nats-server Object
Store and real files. A turn that appended to a rollout uploads its new bytes only; a file that shrank, was
replaced or rewritten is stored whole again; a write stopped between its segments and its manifest leaves the
earlier state readable; an earlier release's single tar still restores; and an archive whose manifest and
segments disagree, or that claims more than the bound, restores nothing."""

from __future__ import annotations

import gzip
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest

from treadle.checkpoints.archive import ArchiveUnavailable, Holding, JetStreamArchive
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.native_states import NativeStates, object_name
from treadle.providers.base import ProviderAdapter, Turn, TurnSink
from treadle.providers.claude import ClaudeAdapter
from treadle.providers.claude.settings import ClaudeSettings
from treadle.providers.codex import CodexAdapter, CodexSettings
from treadle.providers.native_manifest import (
    INLINE_TOTAL,
    MAX_SEGMENTS,
    KeptFile,
    Manifest,
    Segment,
    decode,
    encode,
    merge_from,
    seal,
    segment_name,
    stored,
)
from treadle.providers.native_state import MAX_MEMBERS, NativeFiles, NativeStateRefused, pack, restore
from treadle.providers.protocol import PlaceSession
from treadle.runtime.metrics import NATIVE_STATE

THREAD = "01a24e98-66ec-7310-abfd-7999311475fc"
ROLLOUT = f"sessions/2026/12/07/rollout-2026-12-07T03-41-11-{THREAD}.jsonl"
REQUEST = PlaceSession(
    tenant="acme", thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id="pth_1", workspace="ws"
)
NAME = object_name("acme", "codex", "pth_1")


class Spied(JetStreamArchive):
    """The real archive, recording what it was asked to write, and failing the manifest's put on demand (a
    host that stopped between its segments and its manifest)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.puts: list[tuple[str, int]] = []
        self.fail_manifest = False

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        if name == NAME and self.fail_manifest:
            raise ArchiveUnavailable("stopped before the manifest")
        self.puts.append((name, len(data)))
        await super().put(name, data, new=new, holding=holding)


@pytest.fixture
async def archive(tmp_path) -> AsyncIterator[Spied]:
    server = NatsServer(tmp_path / "nats", auth=False)
    await server.start()
    nc = await nats.connect(server.url)
    try:
        await streams.ensure(nc.jetstream())
        yield Spied(nc.jetstream(), timeout=5.0)
    finally:
        await nc.close()
        await server.stop()


class Files(ProviderAdapter):
    """An adapter whose native state is the files the test names under ``home``."""

    name = "files"

    def __init__(self, home: Path, *names: str) -> None:
        super().__init__(Path("."))
        self.home, self.names = home, names
        for name in names:
            (home / name).parent.mkdir(parents=True, exist_ok=True)

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        return fresh_ref, False

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        return None

    async def native_state(self) -> NativeFiles | None:
        return NativeFiles(self.home, self.names)

    def append(self, data: bytes, name: str = "") -> None:
        with (self.home / (name or self.names[0])).open("ab") as file:
            file.write(data)


def lines(count: int, seed: str = "a") -> bytes:
    return b"".join(
        b'{"turn": "%s", "n": %d, "text": "%s"}\n' % (seed.encode(), i, os.urandom(24).hex().encode())
        for i in range(count)
    )


async def manifest(archive: Spied) -> Manifest:
    data = await archive.get(NAME)
    assert data is not None
    return decode(data)


def outcome(label: str) -> float:
    return NATIVE_STATE.labels(label)._value.get()


async def test_an_appended_rollout_uploads_only_what_the_turn_added_and_restores_byte_for_byte(tmp_path, archive):
    adapter = Files(tmp_path / "home", "state.jsonl", "small.json")
    adapter.append(lines(1000))  # ~100 KB
    (adapter.home / "small.json").write_bytes(b"{}")
    keeper = NativeStates(archive)
    await keeper.keep(REQUEST, adapter)
    first = await manifest(archive)
    assert {k.path: k.size for k in first.files} == {
        "state.jsonl": (adapter.home / "state.jsonl").stat().st_size,
        "small.json": 2,
    }

    archive.puts.clear()
    delta = lines(40, "b")  # ~4 KB
    adapter.append(delta)
    await keeper.keep(REQUEST, adapter)
    second = await manifest(archive)
    written = dict(archive.puts)
    assert set(written) == {NAME}  # a turn's few KB travel in the manifest: one write
    assert written[NAME] < len(delta) + 1024  # its bytes gzipped (base64), never the whole file
    state = {k.path: k for k in second.files}
    assert state["state.jsonl"].segments[:-1] == {k.path: k for k in first.files}["state.jsonl"].segments
    assert state["state.jsonl"].segments[-1].size == len(delta)
    assert state["small.json"] == {k.path: k for k in first.files}["small.json"]  # not read, not written

    archive.puts.clear()
    big = lines(500, "c")  # ~50 KB in one turn: a segment of its own (with the 4 KB), then the manifest
    adapter.append(big)
    await keeper.keep(REQUEST, adapter)
    third = await manifest(archive)
    segment = {k.path: k for k in third.files}["state.jsonl"].segments[-1]
    assert [name for name, _ in archive.puts] == [segment_name(NAME, segment.index), NAME]
    assert archive.puts[1][1] < 4096
    assert [s.inline is None for s in {k.path: k for k in third.files}["state.jsonl"].segments] == [True, True]

    archive.puts.clear()
    await keeper.keep(REQUEST, adapter)  # nothing changed: nothing sent
    assert archive.puts == []
    assert await keeper.fetch(NAME) == {
        "state.jsonl": (adapter.home / "state.jsonl").read_bytes(),
        "small.json": b"{}",
    }


async def test_appends_merge_into_few_segments_and_a_fresh_host_restores_them(tmp_path, archive):
    adapter = Files(tmp_path / "home", "state.jsonl")
    keeper = NativeStates(archive)
    for turn in range(100):
        adapter.append(lines(20, str(turn)))  # ~2 KB
        await keeper.keep(REQUEST, adapter)
    kept = await manifest(archive)
    assert len(kept.files[0].segments) <= 8  # binary counting: log2(100) + 1
    assert await NativeStates(archive).fetch(NAME) == {"state.jsonl": (adapter.home / "state.jsonl").read_bytes()}
    named = {segment_name(NAME, index) for index in stored(kept)}
    written = {name for name, _ in archive.puts if name != NAME}
    assert named and written - named
    for name in written - named:  # what merged away was deleted
        assert await archive.get(name) is None


@pytest.mark.parametrize("change", ["shrink", "rewrite-tail", "replace-other"])
async def test_a_file_that_was_not_simply_appended_to_is_stored_whole(tmp_path, archive, change):
    adapter = Files(tmp_path / "home", "state.jsonl")
    path = adapter.home / "state.jsonl"
    adapter.append(lines(600))  # ~60 KB: a segment of its own
    keeper = NativeStates(archive)
    await keeper.keep(REQUEST, adapter)
    adapter.append(lines(10, "b"))
    await keeper.keep(REQUEST, adapter)
    before = await manifest(archive)
    assert len(before.files[0].segments) == 2
    data = path.read_bytes()
    if change == "shrink":  # a rollback that cut the conversation short
        os.truncate(path, len(data) // 2)
    elif change == "rewrite-tail":  # in place, its last lines, then grown
        with path.open("r+b") as file:
            file.seek(len(data) - 100)
            file.write(b"X" * 100)
        adapter.append(b"more\n")
    else:  # renamed over by another file, longer
        staging = path.with_suffix(".new")
        staging.write_bytes(b"other\n" + data)
        staging.replace(path)
    archive.puts.clear()
    await keeper.keep(REQUEST, adapter)
    after = await manifest(archive)
    assert [s.size for s in after.files[0].segments] == [path.stat().st_size]
    assert await keeper.fetch(NAME) == {"state.jsonl": path.read_bytes()}
    for segment in before.files[0].segments:  # what the new manifest no longer names is gone
        assert await archive.get(segment_name(NAME, segment.index)) is None


@pytest.mark.parametrize("change", ["restarted", "replaced", "touched", "restored"])
async def test_a_file_whose_stored_bytes_are_still_its_start_sends_only_what_follows(tmp_path, archive, change):
    """Not known to this host as stored (a restarted host, a file renamed over by a longer copy, one touched,
    one a restore wrote): its stored segments are checked against it, and not sent again."""
    adapter = Files(tmp_path / "home", "state.jsonl")
    path = adapter.home / "state.jsonl"
    adapter.append(lines(600))  # ~60 KB: a segment of its own
    keeper = NativeStates(archive)
    await keeper.keep(REQUEST, adapter)
    before = await manifest(archive)
    data = path.read_bytes()
    if change == "restarted":
        keeper = NativeStates(archive)
    elif change == "replaced":
        staging = path.with_suffix(".new")
        staging.write_bytes(data)
        staging.replace(path)
    elif change == "touched":
        os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))
    else:
        path.unlink()
        restore(adapter.home, await keeper.fetch(NAME) or {})
    archive.puts.clear()
    await keeper.keep(REQUEST, adapter)  # nothing new: nothing sent
    assert archive.puts == []
    adapter.append(lines(10, "b"))
    await keeper.keep(REQUEST, adapter)
    after = await manifest(archive)
    assert [name for name, _ in archive.puts] == [NAME]
    assert after.files[0].segments[0] == before.files[0].segments[0]
    assert await keeper.fetch(NAME) == {"state.jsonl": path.read_bytes()}


async def test_a_write_stopped_before_its_manifest_leaves_the_earlier_state_and_is_redone(tmp_path, archive):
    adapter = Files(tmp_path / "home", "state.jsonl")
    adapter.append(lines(100))
    keeper = NativeStates(archive)
    await keeper.keep(REQUEST, adapter)
    earlier = (adapter.home / "state.jsonl").read_bytes()
    adapter.append(lines(400, "b"))  # ~40 KB: a segment of its own
    archive.fail_manifest = True
    failed = outcome("store_failed")
    await keeper.keep(REQUEST, adapter)  # the segment is written, the manifest is not
    assert outcome("store_failed") == failed + 1
    orphan = archive.puts[-1][0]
    assert orphan != NAME and await archive.get(orphan) is not None  # the segment nothing names
    assert await keeper.fetch(NAME) == {"state.jsonl": earlier}  # never a mix, never a shorter file
    archive.fail_manifest = False
    for host in (keeper, NativeStates(archive)):  # the same host, or one restarted: the turn is kept
        adapter.append(lines(3, "c"))
        await host.keep(REQUEST, adapter)
        assert await host.fetch(NAME) == {"state.jsonl": (adapter.home / "state.jsonl").read_bytes()}


async def test_a_manifest_written_by_another_host_since_is_never_overwritten_or_damaged(tmp_path, archive):
    one, other = Files(tmp_path / "one", "state.jsonl"), Files(tmp_path / "other", "state.jsonl")
    one.append(lines(400))  # ~40 KB: segments of their own
    first = NativeStates(archive)
    await first.keep(REQUEST, one)
    other.append(lines(800, "o"))
    second = NativeStates(archive)
    await second.keep(REQUEST, other)  # the session moved and came back
    one.append(lines(300, "b"))
    archive.fail_manifest = True
    await first.keep(REQUEST, one)  # stopped after its segment: the other host's state is whole
    assert await first.fetch(NAME) == {"state.jsonl": (other.home / "state.jsonl").read_bytes()}
    archive.fail_manifest = False
    await first.keep(REQUEST, one)  # its append would name segments the other host dropped: stored whole
    assert [s.size for s in (await manifest(archive)).files[0].segments] == [(one.home / "state.jsonl").stat().st_size]
    assert await first.fetch(NAME) == {"state.jsonl": (one.home / "state.jsonl").read_bytes()}
    other.append(lines(300, "p"))
    conflicts = outcome("stored")
    await second.keep(REQUEST, other)  # what it remembers was replaced: its write is refused, then made whole
    assert outcome("stored") == conflicts + 1
    assert [s.size for s in (await manifest(archive)).files[0].segments] == [
        (other.home / "state.jsonl").stat().st_size
    ]
    assert await second.fetch(NAME) == {"state.jsonl": (other.home / "state.jsonl").read_bytes()}


async def test_an_earlier_releases_single_tar_restores_and_is_replaced_by_a_manifest(tmp_path, archive):
    adapter = Files(tmp_path / "home", "state.jsonl")
    adapter.append(lines(100))
    await archive.put(NAME, pack(adapter.home, ["state.jsonl"]))  # as the release before this one kept it
    keeper = NativeStates(archive)
    assert await keeper.fetch(NAME) == {"state.jsonl": (adapter.home / "state.jsonl").read_bytes()}
    adapter.append(lines(5, "b"))
    await keeper.keep(REQUEST, adapter)
    assert (await manifest(archive)).files[0].path == "state.jsonl"
    assert await NativeStates(archive).fetch(NAME) == {"state.jsonl": (adapter.home / "state.jsonl").read_bytes()}


async def kept_with(archive: Spied, manifest_: Manifest, segments: dict[int, bytes]) -> None:
    for index, data in segments.items():
        await archive.put(segment_name(NAME, index), data)
    await archive.put(NAME, encode(manifest_))


def inlined(index: int, size: int) -> Segment:
    segment, data = seal(index, b"x" * size)
    return msgspec.structs.replace(segment, inline=data)


def one_file(*segments: Segment, path: str = "state.jsonl") -> Manifest:
    return Manifest((KeptFile(path, segments),))


async def test_an_archive_whose_manifest_and_segments_disagree_restores_nothing(archive):
    keeper = NativeStates(archive)
    good, stored = seal(0, b"line one\n")
    other, other_stored = seal(1, b"line two\n")
    await kept_with(archive, one_file(good, other), {0: stored, 1: stored})  # segment 1 holds segment 0's bytes
    with pytest.raises(NativeStateRefused):
        await keeper.fetch(NAME)
    await kept_with(archive, one_file(good, other), {0: stored})  # segment 1 missing
    await archive.delete(segment_name(NAME, 1))
    with pytest.raises(NativeStateRefused):
        await keeper.fetch(NAME)
    await kept_with(archive, one_file(good, other), {0: stored, 1: b"not gzip"})
    with pytest.raises(NativeStateRefused):
        await keeper.fetch(NAME)
    bomb = Segment(1, 10, other.sha256)  # the manifest says 10 bytes; the segment inflates to 8 MB of zeros
    await kept_with(archive, one_file(good, bomb), {0: stored, 1: gzip.compress(b"\0" * 8 * 1024 * 1024)})
    with pytest.raises(NativeStateRefused):
        await keeper.fetch(NAME)
    inline = msgspec.structs.replace(other, inline=stored)  # kept in the manifest, but another segment's bytes
    await kept_with(archive, one_file(good, inline), {0: stored})
    with pytest.raises(NativeStateRefused):
        await keeper.fetch(NAME)
    await kept_with(archive, one_file(good, other), {0: stored, 1: other_stored})
    assert await keeper.fetch(NAME) == {"state.jsonl": b"line one\nline two\n"}
    await kept_with(archive, one_file(good, msgspec.structs.replace(other, inline=other_stored)), {0: stored})
    assert await keeper.fetch(NAME) == {"state.jsonl": b"line one\nline two\n"}


@pytest.mark.parametrize(
    "hostile",
    [
        one_file(seal(0, b"x")[0], path="../escaped.jsonl"),
        one_file(seal(0, b"x")[0], path="/etc/passwd"),
        one_file(seal(0, b"x")[0], seal(0, b"y")[0]),  # one index named twice
        one_file(Segment(-1, 1, "0" * 64)),  # not an index
        one_file(Segment(0, 64 * 1024 * 1024, "0" * 64), Segment(1, 1, "0" * 64)),  # over the bound
        one_file(*(seal(i, b"x")[0] for i in range(MAX_SEGMENTS + 1))),
        one_file(*(inlined(i, 30_000) for i in range(9))),  # more kept in the manifest than it may
        Manifest((KeptFile("a", ()), KeptFile("a", ()))),
    ],
    ids=[
        "dotdot",
        "absolute",
        "index-twice",
        "index-negative",
        "over-bound",
        "too-many-segments",
        "too-much-inline",
        "name-twice",
    ],
)
async def test_a_hostile_manifest_is_refused_before_any_segment_is_read(archive, hostile):
    await archive.put(NAME, encode(hostile))
    with pytest.raises(NativeStateRefused):
        await NativeStates(archive).fetch(NAME)
    for broken in (b"treadle-native-state/2\n{", b"treadle-native-state/2\n" + b'{"files": [], "extra": 1}'):
        with pytest.raises(NativeStateRefused):
            decode(broken)


def test_a_manifest_too_large_to_read_back_is_never_written():
    with pytest.raises(NativeStateRefused):  # what would not be read back is never written
        encode(
            Manifest(
                tuple(KeptFile(f"f{i}", tuple(seal(i * 4 + j, b"x")[0] for j in range(4))) for i in range(MAX_MEMBERS))
            )
        )


def test_segments_merge_as_a_binary_count_and_never_exceed_the_bound():
    sizes: list[int] = []
    for _ in range(1000):
        cut = merge_from(sizes, 4096)
        sizes = [*sizes[:cut], sum(sizes[cut:]) + 4096]
        assert all(a > b for a, b in zip(sizes, sizes[1:], strict=False))
    assert len(sizes) == bin(1000).count("1")
    shrinking: list[int] = []
    for size in range(10_000, 9_000, -1):  # each append smaller than the last: capped
        cut = merge_from(shrinking, size)
        shrinking = [*shrinking[:cut], sum(shrinking[cut:]) + size]
    assert len(shrinking) <= MAX_SEGMENTS


async def test_a_huge_append_drops_the_state_and_links_or_strays_are_never_read(tmp_path, archive):
    adapter = Files(tmp_path / "home", "state.jsonl", "linked.jsonl")
    adapter.append(lines(10))
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"the host's own")
    os.symlink(secret, adapter.home / "linked.jsonl")
    keeper = NativeStates(archive, max_bytes=64 * 1024)
    await keeper.keep(REQUEST, adapter)
    assert await keeper.fetch(NAME) == {"state.jsonl": (adapter.home / "state.jsonl").read_bytes()}
    (adapter.home / "state.jsonl").unlink()
    os.symlink(secret, adapter.home / "state.jsonl")  # the rollout replaced by a link: nothing to keep
    await keeper.keep(REQUEST, adapter)
    assert b"the host's own" not in b"".join((await keeper.fetch(NAME) or {}).values())
    (adapter.home / "state.jsonl").unlink()
    adapter.append(lines(10))
    await keeper.keep(REQUEST, adapter)
    adapter.append(b"0" * 128 * 1024)  # past the bound in one turn
    await keeper.keep(REQUEST, adapter)
    assert await archive.get(NAME) is None and await keeper.fetch(NAME) is None


# --- the Codex adapter finds a thread's rollout once -------------------------------------------------------


@pytest.fixture
def codex_home_root():
    root = Path.home() / ".cache" / "treadle-test" / "native-state" / uuid.uuid4().hex[:12]  # not under /tmp
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_codex_remembers_its_rollout_and_looks_again_only_when_it_is_gone(tmp_path, codex_home_root, archive):
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id="pth_1",
        workspace=str(tmp_path),
    )  # fmt: skip
    adapter = CodexAdapter(tmp_path, request, tmp_path / "runtime" / "ps_1", CodexSettings(home_root=codex_home_root))
    adapter._thread_id = THREAD  # as open_thread leaves it
    home = codex_home_root / "acme"
    assert await adapter.native_state() is None  # a new thread's rollout is written with its first turn
    (home / ROLLOUT).parent.mkdir(parents=True)
    (home / ROLLOUT).write_bytes(lines(10))
    assert (await adapter.native_state() or NativeFiles(home, ())).files == (ROLLOUT,)
    later = ROLLOUT.replace("2026/12/07", "2026/12/08").replace("2026-12-07", "2026-12-08")
    (home / later).parent.mkdir(parents=True)
    (home / later).write_bytes(lines(10))
    assert (await adapter.native_state() or NativeFiles(home, ())).files == (ROLLOUT,)  # not searched again
    (home / ROLLOUT).unlink()
    os.symlink(home / later, home / ROLLOUT)  # replaced by a link: searched again, the link left out
    assert (await adapter.native_state() or NativeFiles(home, ())).files == (later,)
    keeper = NativeStates(archive)
    await keeper.keep(request, adapter)
    shutil.rmtree(home / "sessions")  # the node lost it: the host puts it back
    resuming = PlaceSession(
        tenant="acme", thread="thr_1", provider="codex", session_id="ps_2", provider_thread_id="pth_1",
        native_ref=THREAD, workspace=str(tmp_path),
    )  # fmt: skip
    fresh = CodexAdapter(tmp_path, resuming, tmp_path / "runtime" / "ps_2", CodexSettings(home_root=codex_home_root))
    await keeper.restore(resuming, fresh)
    assert (home / later).read_bytes().count(b"\n") == 10 and not (home / ROLLOUT).exists()


async def test_many_small_files_keep_the_manifest_within_its_inline_bound(tmp_path, archive):
    names = tuple(f"sessions/{i:02d}.json" for i in range(40))
    adapter = Files(tmp_path / "home", *names)
    keeper = NativeStates(archive)
    for turn in range(3):  # 40 files of ~10 KB, then ~4 KB more each turn: more than a manifest keeps
        for name in names:
            adapter.append(lines(100 if turn == 0 else 40, f"{turn}"), name)
        await keeper.keep(REQUEST, adapter)
        kept = await manifest(archive)
        assert sum(s.size for k in kept.files for s in k.segments if s.inline is not None) <= INLINE_TOTAL
        assert stored(kept)  # the rest are objects of their own
        assert await NativeStates(archive).fetch(NAME) == {n: (adapter.home / n).read_bytes() for n in names}


async def test_claude_remembers_its_transcript_and_searches_again_only_when_it_is_gone(tmp_path):
    session = "5b0c9a36-3f43-4d0e-9a43-4f0d8d1f2a11"
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="claude", session_id="ps_1", provider_thread_id="pth_1",
        native_ref=session, workspace=str(tmp_path),
    )  # fmt: skip
    adapter = ClaudeAdapter(
        tmp_path, request, tmp_path / "runtime" / "ps_1", ClaudeSettings(threads_dir=tmp_path / "threads")
    )
    adapter.session_id = session
    transcript = f"projects/-srv-ws-acme-thr_1/{session}.jsonl"
    (adapter.store.root / transcript).parent.mkdir(parents=True)
    (adapter.store.root / transcript).write_bytes(lines(3))
    searches: list[str] = []
    search = adapter.store.transcript

    def counted(session_id: str) -> Path | None:
        searches.append(session_id)
        return search(session_id)

    adapter.store.transcript = counted  # type: ignore[method-assign]
    for _ in range(3):
        native = await adapter.native_state()
        assert native is not None and native.files == (transcript,)
    assert searches == [session]  # found once, then only checked
    (adapter.store.root / transcript).unlink()
    os.symlink(tmp_path, adapter.store.root / transcript)  # replaced by a link: searched again, left out
    assert await adapter.native_state() is None
    assert searches == [session, session]
