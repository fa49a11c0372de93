#!/usr/bin/env bash
# The image's one entrypoint: the first argument names the worker (or `treadle …`, any other command runs as
# given). It checks the volume directories a worker writes before starting it, so a volume the worker's uid
# cannot write (a fresh root-owned disk without fsGroup) stops it with one line naming the directory and the
# fix, instead of a traceback deep in a worker or, for broker-init, a NATS that never starts.
set -euo pipefail

state_dir=${TREADLE_STATE_DIR:-/var/lib/treadle}
nats_dir=${TREADLE_NATS_AUTH_DIR:-/nats-auth}

writable() {  # a directory this uid can create files in (made when missing and its parent allows)
    mkdir -p "$1" 2>/dev/null || true
    if ! { [ -d "$1" ] && [ -w "$1" ] && [ -x "$1" ]; }; then
        echo "error: $1 is not writable by uid $(id -u) gid $(id -g) (groups $(id -G)): mount it with" \
             "fsGroup $(id -g) (Kubernetes) or chown it to $(id -u) (docker volumes made from the image are)" >&2
        exit 78  # EX_CONFIG: restarting will not help
    fi
}

worker=${1:-gateway}
[ $# -gt 0 ] && shift
case "$worker" in
    gateway)       exec python -m treadle.gateway "$@" ;;
    coordinator)   exec python -m treadle.coordinator "$@" ;;
    supervisor)    exec python -m treadle.supervisor "$@" ;;
    projector)     exec python -m treadle.projector "$@" ;;
    scheduler)     exec python -m treadle.scheduler "$@" ;;
    webhooks)      exec python -m treadle.deliveries "$@" ;;
    provider-host) writable "$state_dir"; exec python -m treadle.provider_host "$@" ;;
    checkpoints)   writable "$state_dir"; exec python -m treadle.checkpoints_service "$@" ;;
    broker-init)   # auth.conf for the NATS nodes (service user from the password variable; tenant credentials kept)
        writable "$nats_dir"
        exec treadle broker init --nats-dir "$nats_dir" --password-env TREADLE_NATS_PASSWORD "$@" ;;
    *)             exec "$worker" "$@" ;;
esac
