#!/usr/bin/env bash
# Print the path of bwrap (bubblewrap), installing Debian's bubblewrap package when it is missing and this
# runs as root. Provider hosts run every runtime (Codex, Claude Code) in a bubblewrap sandbox and refuse to
# start runtime sessions without one unless TREADLE_SANDBOX=off (README, "Security: the runtime sandbox").
# Never fails `make setup`: without bubblewrap it says what is missing.
set -uo pipefail

if path=$(command -v bwrap 2>/dev/null); then echo "$path"; exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "bwrap not found; installing Debian package bubblewrap" >&2
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2 ||
       { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2; }; then
        command -v bwrap && exit 0
    fi
fi
echo "bubblewrap is not installed (run as root: apt-get install -y bubblewrap). Without it provider hosts" \
     "start no Codex or Claude session unless TREADLE_SANDBOX=off (which runs them unsandboxed)." >&2
echo "missing"
