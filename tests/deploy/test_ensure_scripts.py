"""``make setup``'s installers (scripts/ensure-*.sh) wait for a dpkg lock another apt holds and fail loudly when
the install fails, rather than printing ``missing`` and exiting 0 (issue 36, finding 11a). The package manager is
the stand-in: ``apt-get`` on the scripts' PATH is a script that records its arguments and answers as apt does
when the lock stays held (a real install would need the network), and ``id`` says root; the rest is the real
shell."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCKED = """#!/bin/sh
echo "$@" >> "{log}"
echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
exit 100
"""
INSTALLS = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in *install*) printf '#!/bin/sh\\n' > "{bin}/{binary}"; chmod 755 "{bin}/{binary}";; esac
exit 0
"""


def _run(tmp_path: Path, script: str, apt: str, binary: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``script`` with a PATH of the real tools it uses and ``apt`` as apt-get; returns its result and the
    log of apt-get's arguments."""
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    bin_dir.mkdir()
    for tool in ("bash", "env", "dirname", "sh", "chmod"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")  # as root, as make setup installs (as another user the
    (bin_dir / "id").chmod(0o755)  # scripts only say what is missing)
    (bin_dir / "apt-get").write_text(apt.format(log=log, bin=bin_dir, binary=binary))
    (bin_dir / "apt-get").chmod(0o755)
    done = subprocess.run(
        [str(bin_dir / "bash"), str(ROOT / "scripts" / script)],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), **env},
        timeout=60,
    )
    return done, log


@pytest.mark.parametrize(
    ("script", "package", "binary"),
    [("ensure-bubblewrap.sh", "bubblewrap", "bwrap"), ("ensure-chromium.sh", "chromium", "chromium")],
)
def test_an_install_the_dpkg_lock_keeps_from_running_fails_loudly_after_waiting(tmp_path, script, package, binary):
    done, log = _run(tmp_path, script, LOCKED, binary)
    assert done.returncode != 0, done
    assert done.stdout.strip() == ""  # neither a path nor "missing": make setup stops here
    assert f"could not install {package}" in done.stderr and "Could not get lock" in done.stderr
    # apt waited for the lock (bounded) on every call: the install, the lists' update, the install again
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith("-o DPkg::Lock::Timeout=600 ") for c in calls), calls
    assert calls[0].endswith(f"install -y -q {package}")


@pytest.mark.parametrize(
    ("script", "package", "binary"),
    [("ensure-bubblewrap.sh", "bubblewrap", "bwrap"), ("ensure-chromium.sh", "chromium", "chromium")],
)
def test_an_install_that_works_prints_the_path(tmp_path, script, package, binary):
    done, log = _run(tmp_path, script, INSTALLS, binary, TREADLE_APT_LOCK_TIMEOUT="5")
    assert done.returncode == 0, done
    assert done.stdout.strip() == str(tmp_path / "bin" / binary)
    assert log.read_text().splitlines() == [f"-o DPkg::Lock::Timeout=5 install -y -q {package}"]


def test_a_lock_timeout_that_is_not_whole_seconds_is_refused(tmp_path):
    done, log = _run(tmp_path, "ensure-bubblewrap.sh", INSTALLS, "bwrap", TREADLE_APT_LOCK_TIMEOUT="5; rm -rf /")
    assert done.returncode != 0 and "whole seconds" in done.stderr
    assert not log.exists()  # apt-get never ran
