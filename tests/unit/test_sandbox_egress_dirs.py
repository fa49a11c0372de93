"""A runtime's egress dir is made while another runtime of the same host stops and removes the host's dir once
it is empty (``Prepared.close``): the start must not fail for it (a warmed runtime's launch did, 1 run in ~10)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from treadle.sandbox.host import socket_dir


def test_a_runtimes_egress_dir_is_made_while_the_hosts_last_other_runtime_removes_the_hosts(tmp_path):
    host = tmp_path / "host"
    failures: list[BaseException] = []

    def runtimes(name: str) -> None:
        try:
            for n in range(2000):
                own = host / f"{name}{n}"
                socket_dir(own, os.getuid(), os.getgid())
                assert own.is_dir()
                for path in (own, host):  # as Prepared.close: its own dir, then the host's if empty
                    with contextlib.suppress(OSError):
                        path.rmdir()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=runtimes, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert not host.exists() or list(Path(host).iterdir()) == []
