#!/usr/bin/env bash
# Makes sure `redis-server` is on PATH: installs Debian's package when missing.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "redis-server is missing: run 'apt-get update && apt-get install -y redis-server' as root" >&2
        exit 1
    fi
    echo "installing redis-server from Debian's packages..." >&2
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # The package may start a system instance on 6379; the tests and demo never use it.
else
    echo "redis-server is missing: install Redis 7 (e.g. 'brew install redis', 'dnf install redis') and retry" >&2
    exit 1
fi
command -v redis-server >/dev/null 2>&1 || { echo "redis-server still not on PATH" >&2; exit 1; }
