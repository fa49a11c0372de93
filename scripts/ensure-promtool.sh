#!/usr/bin/env bash
# Print the path of promtool (checks deploy/monitoring's alert rules in `make test`), taken from Debian's
# prometheus package at a pinned version and unpacked into the venv: nothing is installed system-wide and no
# Prometheus server is started. Prints "missing" (and says why on stderr) when it cannot be had.
set -uo pipefail
VERSION=2.42.0+ds-5+deb12u1
DEST=${1:-.venv/tools/prometheus}
BIN=$DEST/usr/bin/promtool
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
work=$(mktemp -d) && chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
if command -v apt-get >/dev/null; then
    ( cd "$work" && { apt-get download -q "prometheus=$VERSION" >&2 ||
        { apt-get -o DPkg::Lock::Timeout="${TREADLE_APT_LOCK_TIMEOUT:-600}" update -q >&2 && apt-get download -q "prometheus=$VERSION" >&2; }; } ) &&
        mkdir -p "$DEST" && dpkg-deb -x "$work"/prometheus_*.deb "$work/x" &&
        install -D -m 755 "$work/x/usr/bin/promtool" "$BIN" && { echo "$BIN"; exit 0; }
fi
echo "promtool could not be had (Debian package prometheus=$VERSION): the alert rules are not checked" >&2
echo "missing"
