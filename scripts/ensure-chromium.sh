#!/usr/bin/env bash
# Print the path of Chromium, installing Debian's chromium package when it is missing and this runs as root.
# The console's browser tests (tests/console/) drive it with Playwright; Playwright's own browser download is
# never used (nothing in the suite may leave 127.0.0.1, and the browser comes from the distribution).
# Without root it says what is missing (the browser tests then fail saying so); an install that fails exits
# non-zero, saying why.
set -uo pipefail

if path=$(command -v chromium 2>/dev/null); then echo "$path"; exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "chromium not found; installing Debian package chromium" >&2
    bash "$(dirname "$0")/apt-install.sh" chromium || exit 1
    command -v chromium && exit 0
    echo "error: chromium is still not found after installing the package chromium" >&2
    exit 1
fi
echo "chromium is not installed (run as root: apt-get install -y chromium); the console's browser tests" \
     "(tests/console/) need it." >&2
echo "missing"
