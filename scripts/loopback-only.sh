#!/usr/bin/env bash
# Run a command where only loopback exists (a fresh network namespace with `lo` up), so nothing it
# starts, real provider runtimes included, can reach beyond 127.0.0.1. Where the machine does not allow
# a new namespace (no privilege, no `ip`), run it as is and say so.
set -euo pipefail
if unshare -n true 2>/dev/null && command -v ip >/dev/null; then
    exec unshare -n bash -c 'ip link set lo up && exec "$@"' loopback-only "$@"
fi
echo "loopback-only: cannot create a network namespace here; running with the host network" >&2
exec "$@"
