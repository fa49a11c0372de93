"""The ACP client file methods serve the workspace and nothing else (issue 22): the hostile paths an agent may
send are refused with a typed error and change nothing. Real files in a temporary directory."""

from __future__ import annotations

import os

import pytest

from treadle.providers.acp.files import FileRefused, WorkspaceFiles


@pytest.fixture
def layout(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "secret"
    ws.mkdir()
    outside.mkdir()
    (outside / "key.txt").write_text("top secret\n")
    (ws / "notes.txt").write_text("one\ntwo\nthree\n")
    os.symlink(outside, ws / "out")  # a directory link out of the workspace
    os.symlink(outside / "key.txt", ws / "key-link")  # a file link out of it
    return ws, outside


def test_reads_and_writes_inside_the_workspace(layout):
    ws, _ = layout
    files = WorkspaceFiles(ws)
    assert files.read({"path": str(ws / "notes.txt")}) == {"content": "one\ntwo\nthree\n"}
    assert files.read({"path": str(ws / "notes.txt"), "line": 2, "limit": 1}) == {"content": "two\n"}
    files.write({"path": str(ws / "new" / "made.txt"), "content": "hello"})
    assert (ws / "new" / "made.txt").read_text() == "hello"


@pytest.mark.parametrize(
    "path",
    [
        "notes.txt",  # relative
        "{ws}/../secret/key.txt",  # climbs out
        "{ws}/sub/../../secret/key.txt",
        "{secret}/key.txt",  # absolute, outside
        "/etc/passwd",
        "{ws}/out/key.txt",  # through a directory link out
        "{ws}/key-link",  # a file link out
        "{ws}",  # the workspace itself
        "",
        "{ws}/a\0b",
        "{ws}/" + "x" * 5000,
    ],
)
def test_hostile_paths_are_refused_and_nothing_changes(layout, path):
    ws, outside = layout
    files = WorkspaceFiles(ws)
    raw = path.format(ws=ws, secret=outside)
    with pytest.raises(FileRefused):
        files.read({"path": raw})
    with pytest.raises(FileRefused):
        files.write({"path": raw, "content": "pwned"})
    assert (outside / "key.txt").read_text() == "top secret\n"
    assert sorted(os.listdir(outside)) == ["key.txt"]


@pytest.mark.parametrize("params", [{"path": 7}, {"line": 0}, {"limit": -1}, {"line": True}])
def test_bad_read_arguments_are_refused(layout, params):
    ws, _ = layout
    with pytest.raises(FileRefused):
        WorkspaceFiles(ws).read({"path": str(ws / "notes.txt"), **params})


def test_a_write_that_is_not_text_is_refused(layout):
    ws, _ = layout
    with pytest.raises(FileRefused):
        WorkspaceFiles(ws).write({"path": str(ws / "notes.txt"), "content": {"no": 1}})
    assert (ws / "notes.txt").read_text() == "one\ntwo\nthree\n"
