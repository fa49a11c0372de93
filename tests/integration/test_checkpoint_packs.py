"""Merging the packs of incremental captures (packs.py): readable by git, and each byte copied only a few times
over a long thread's life (issue 24)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from treadle.checkpoints import packs


def git_dir(tmp_path: Path) -> Path:
    gitdir = tmp_path / "c.git"
    subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True)
    (gitdir / "treadle").mkdir()
    return gitdir


def blobs(tag: str, count: int, size: int) -> dict[bytes, tuple[int, bytes]]:
    out = {}
    for i in range(count):
        data = (f"{tag} {i} ".encode() + os.urandom(size // 2).hex().encode())[:size]
        out[packs.object_id(packs.BLOB, data)] = (packs.BLOB, data)
    return out


def test_a_big_pack_is_left_alone_while_the_small_ones_together_are_less_than_half_of_it(tmp_path: Path):
    gitdir = git_dir(tmp_path)
    objects, mine = gitdir / "objects", gitdir / "treadle"
    written: dict[bytes, tuple[int, bytes]] = {}
    big = blobs("big", 200, 1000)
    written |= big
    big_name = packs.write(objects, mine, big)
    for n in range(packs.MERGE_AT - 2):
        small = blobs(f"small{n}", 2, 300)
        written |= small
        packs.write(objects, mine, small)
        assert packs.merge(objects, mine) is None  # fewer than MERGE_AT packs
    last = blobs("last", 1, 10)
    written |= last
    packs.write(objects, mine, last)
    merged = packs.merge(objects, mine)  # the MERGE_AT-th pack

    assert merged is not None and merged != big_name
    assert packs.ours(objects, mine) == [big_name, merged]  # the big one was not copied again
    ids = b"".join(oid.hex().encode() + b"\n" for oid in written)
    out = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objectname) %(objecttype)"],
        input=ids, env=dict(os.environ, GIT_DIR=str(gitdir)), capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    assert "missing" not in out and out.count(" blob\n") == len(written)


def test_over_a_long_thread_each_byte_is_copied_a_few_times_not_once_every_merge(tmp_path: Path):
    gitdir = git_dir(tmp_path)
    objects, mine = gitdir / "objects", gitdir / "treadle"
    written = copied = 0
    for n in range(400):
        new = blobs(f"c{n}", 3, 1000)
        written += sum(len(d) for _, d in new.values())
        packs.write(objects, mine, new)
        merged = packs.merge(objects, mine)
        if merged is not None:
            copied += (objects / "pack" / f"{merged}.pack").stat().st_size
    assert copied < 6 * written
    assert len(packs.ours(objects, mine)) < 2 * packs.MERGE_AT


def test_merged_packs_verify_whole_with_an_object_in_two_of_them_or_not(tmp_path: Path):
    """A merge copies each pack's entries as one block, ids and CRCs from the indexes; an object two packs hold (a
    retried capture's) makes it merge entry by entry instead. Either way git verifies every object and CRC."""
    for twice in (False, True):
        gitdir = git_dir(tmp_path / str(twice))
        objects, mine = gitdir / "objects", gitdir / "treadle"
        written: dict[bytes, tuple[int, bytes]] = {}
        for n in range(packs.MERGE_AT):
            new = blobs(f"p{n}", 5, 400)
            if twice and n == 3:
                new |= dict(list(written.items())[:1])  # already in the first pack
            written |= new
            packs.write(objects, mine, new)
        merged = packs.merge(objects, mine)
        assert merged is not None and packs.ours(objects, mine) == [merged]
        env = dict(os.environ, GIT_DIR=str(gitdir))
        subprocess.run(["git", "verify-pack", str(objects / "pack" / f"{merged}.idx")], env=env, check=True)
        listed = subprocess.run(
            ["git", "show-index"], input=(objects / "pack" / f"{merged}.idx").read_bytes(), capture_output=True,
            check=True,
        ).stdout.decode()  # fmt: skip
        assert {line.split()[1] for line in listed.splitlines()} == {oid.hex() for oid in written}
