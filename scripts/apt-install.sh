#!/usr/bin/env bash
# Install Debian packages with apt-get, waiting (bounded) for another apt or dpkg that holds the lock rather
# than failing at once, and failing loudly: a non-zero exit with the reason when the packages are not installed.
# The ensure-*.sh scripts use it; the arguments go to `apt-get install` (options, then packages).
# TREADLE_APT_LOCK_TIMEOUT: seconds to wait for the dpkg lock (default 600).
set -uo pipefail

if [ "$#" -eq 0 ]; then echo "usage: apt-install.sh [APT-GET-OPTION...] PACKAGE..." >&2; exit 2; fi
wait_s=${TREADLE_APT_LOCK_TIMEOUT:-600}
case "$wait_s" in ''|*[!0-9]*) echo "error: TREADLE_APT_LOCK_TIMEOUT must be whole seconds" >&2; exit 2 ;; esac
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then echo "error: installing $* needs root or sudo" >&2; exit 1; fi
    SUDO=(sudo)
fi
apt_get() { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$wait_s" "$@" >&2; }

# the package lists may be current already: update only when the install cannot find the packages
if apt_get install -y -q "$@" || { apt_get update -q && apt_get install -y -q "$@"; }; then
    exit 0
fi
echo "error: apt-get could not install $* (waited up to ${wait_s}s for the dpkg lock; see apt's message above)" >&2
exit 1
