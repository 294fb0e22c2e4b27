#!/usr/bin/env bash
# Build the Docker image quorum-lock/redis:local from the host's redis-server
# and redis-cli, without pulling anything from a registry (FROM scratch).
#
#   docker/build-image.sh
#
# Idempotent: re-running with unchanged host binaries hits the build cache and
# yields the same image ID.
#
# To use another image instead (e.g. the official `redis:7` where a registry
# is reachable), don't run this script; export REDIS_IMAGE=redis:7 before
# using docker/fault.sh or docker-compose (see docker/README.md).
set -euo pipefail

IMAGE=quorum-lock/redis:local
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DOCKERFILE="$SCRIPT_DIR/Dockerfile.scratch"

die() { echo "build-image.sh: $*" >&2; exit 1; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  cat >&2 <<'EOF'
build-image.sh: redis-server and/or redis-cli not found on this host.
Install them (Debian/Ubuntu, as root) with:

  apt-get update && apt-get install -y redis-server

If the host's redis-server service then starts, it listens on 127.0.0.1:6379
only; it does not interfere with the containers.
EOF
  exit 1
fi
command -v docker >/dev/null 2>&1 || die "docker CLI not found"
command -v ldd >/dev/null 2>&1 || die "ldd not found (package libc-bin)"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker engine (is dockerd running? permissions?)"
[[ -f "$DOCKERFILE" ]] || die "missing $DOCKERFILE"

if [[ -n "${REDIS_IMAGE:-}" && "${REDIS_IMAGE}" != "$IMAGE" ]]; then
  echo "note: REDIS_IMAGE=${REDIS_IMAGE} is set, so the compose ensemble will use that image, not $IMAGE" >&2
fi

SERVER_BIN="$(command -v redis-server)"
CLI_BIN="$(command -v redis-cli)"

CTX="$(mktemp -d "${TMPDIR:-/tmp}/quorum-lock-redis-image.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT
ROOTFS="$CTX/rootfs"
mkdir -p "$ROOTFS/usr/local/bin" "$ROOTFS/tmp" "$ROOTFS/data"
chmod 1777 "$ROOTFS/tmp"

# redis-server on Debian is a symlink to redis-check-rdb and picks its mode
# from argv[0]: dereference and keep the name redis-server.
cp -L "$SERVER_BIN" "$ROOTFS/usr/local/bin/redis-server"
cp -L "$CLI_BIN" "$ROOTFS/usr/local/bin/redis-cli"
chmod 0755 "$ROOTFS/usr/local/bin/redis-server" "$ROOTFS/usr/local/bin/redis-cli"

# Every library ldd lists, plus the loader, at the same absolute path.
#   "libfoo.so.1 => /lib/.../libfoo.so.1 (0x...)"  -> field 3
#   "/lib64/ld-linux-x86-64.so.2 (0x...)"          -> field 1
#   "linux-vdso.so.1 (0x...)"                      -> skipped (kernel-provided)
libs="$(
  for bin in "$SERVER_BIN" "$CLI_BIN"; do
    out="$(ldd "$bin")" || die "ldd failed on $bin (statically linked or not an ELF?)"
    if grep -q 'not found' <<<"$out"; then
      die "unresolved libraries for $bin:"$'\n'"$(grep 'not found' <<<"$out")"
    fi
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
  done | sort -u
)"
[[ -n "$libs" ]] || die "ldd listed no libraries; refusing to build an image without a loader"
while IFS= read -r lib; do
  mkdir -p "$ROOTFS$(dirname "$lib")"
  cp -L "$lib" "$ROOTFS$lib"
done <<<"$libs"

# The clockshift LD_PRELOAD shim (tests/shim/clockshift.c), for clock faults
# (docker-compose.clock.yml). Optional: without `cc` the image is built without it.
SHIM_SRC="$SCRIPT_DIR/../tests/shim/clockshift.c"
if [[ -f "$SHIM_SRC" ]] && command -v cc >/dev/null 2>&1; then
  mkdir -p "$ROOTFS/usr/local/lib"
  cc -shared -fPIC -O2 -Wall -o "$ROOTFS/usr/local/lib/clockshift.so" "$SHIM_SRC" \
    || die "cc failed to build $SHIM_SRC"
  chmod 0755 "$ROOTFS/usr/local/lib/clockshift.so"
else
  echo "note: no cc (or no $SHIM_SRC): image built without the clockshift shim" >&2
fi

cp "$DOCKERFILE" "$CTX/Dockerfile"

version="$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
echo "Building $IMAGE from $SERVER_BIN (redis ${version:-unknown}) with $(wc -l <<<"$libs") libraries"
start=$(date +%s.%N)
# No --label/--build-arg: each would add a ~1 s step to the legacy builder.
docker build -t "$IMAGE" "$CTX"
end=$(date +%s.%N)

# Sanity check: the image must run redis-server and redis-cli.
docker run --rm --entrypoint /usr/local/bin/redis-server "$IMAGE" --version >/dev/null \
  || die "built image cannot run redis-server"
docker run --rm --entrypoint /usr/local/bin/redis-cli "$IMAGE" --version >/dev/null \
  || die "built image cannot run redis-cli"

size_bytes="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
size_h="$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f MB", b / 1000000 }')"
printf 'Built %s (%s, %s bytes) in %.1fs\n' "$IMAGE" "$size_h" "$size_bytes" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
