#!/usr/bin/env bash
# Makes sure `redis-server` is on PATH: installs Debian's package when missing.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
# Debian's package also starts a system Redis on 127.0.0.1:6379; the tests and the demo
# never use it (they start their own servers on other ports). See CONTRIBUTING.md,
# "Set-up on a fresh Debian machine".
bash "$(dirname "$0")/apt-install.sh" redis-server redis-server
command -v redis-server >/dev/null 2>&1 || { echo "redis-server still not on PATH" >&2; exit 1; }
