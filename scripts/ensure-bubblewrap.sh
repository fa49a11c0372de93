#!/usr/bin/env bash
# Print the path of bwrap (bubblewrap), installing Debian's bubblewrap package when it is missing and this
# runs as root. Provider hosts run every runtime (Codex, Claude Code) in a bubblewrap sandbox and refuse to
# start runtime sessions without one unless TREADLE_SANDBOX=off (docs/security.md, "The runtime sandbox").
# Without root it says what is missing (exit 0); an install that fails exits non-zero, saying why.
set -uo pipefail

if path=$(command -v bwrap 2>/dev/null); then echo "$path"; exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "bwrap not found; installing Debian package bubblewrap" >&2
    bash "$(dirname "$0")/apt-install.sh" bubblewrap || exit 1
    command -v bwrap && exit 0
    echo "error: bwrap is still not found after installing the package bubblewrap" >&2
    exit 1
fi
echo "bubblewrap is not installed (run as root: apt-get install -y bubblewrap). Without it provider hosts" \
     "start no Codex or Claude session unless TREADLE_SANDBOX=off (which runs them unsandboxed)." >&2
echo "missing"
