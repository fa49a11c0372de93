#!/usr/bin/env bash
# Print the path of Chromium, installing Debian's chromium package when it is missing and this runs as root.
# The console's browser tests (tests/console/) drive it with Playwright; Playwright's own browser download is
# never used (nothing in the suite may leave 127.0.0.1, and the browser comes from the distribution).
# Never fails `make setup`: without Chromium it says what is missing (the browser tests then fail saying so).
set -uo pipefail

if path=$(command -v chromium 2>/dev/null); then echo "$path"; exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "chromium not found; installing Debian package chromium" >&2
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2 ||
       { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2; }; then
        command -v chromium && exit 0
    fi
fi
echo "chromium is not installed (run as root: apt-get install -y chromium); the console's browser tests" \
     "(tests/console/) need it." >&2
echo "missing"
