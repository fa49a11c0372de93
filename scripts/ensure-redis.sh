#!/usr/bin/env bash
# Print the path of a redis-server binary, installing Debian's redis-server package if there is
# none. The package's system service is kept from starting: Treadle runs its own redis-server on
# a free port, and a stray one on 6379 would only get in the way. Safe to run repeatedly.
set -euo pipefail

find_redis() {
    command -v redis-server 2>/dev/null && return 0
    local dir
    for dir in /usr/bin /usr/sbin /usr/local/bin; do
        if [ -x "$dir/redis-server" ]; then echo "$dir/redis-server"; return 0; fi
    done
    return 1
}

if find_redis; then exit 0; fi

echo "redis-server not found; installing Debian package redis-server" >&2
if ! command -v apt-get >/dev/null; then
    echo "error: no apt-get here; install redis-server (Redis >= 7) with your package manager" >&2
    exit 1
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
        echo "error: installing redis-server needs root or sudo" >&2
        exit 1
    fi
    SUDO=(sudo)
fi

# invoke-rc.d and deb-systemd-invoke ask policy-rc.d before starting a service; 101 means "no".
# Only install our own policy if there is none, and remove it afterwards.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi

bash "$(dirname "$0")/apt-install.sh" --no-install-recommends redis-server

if ! find_redis; then
    echo "error: redis-server still not found after installing the package" >&2
    exit 1
fi
