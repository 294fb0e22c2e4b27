#!/usr/bin/env bash
# usage: apt-install.sh WHAT PACKAGE...
# Installs Debian packages (with sudo when not root), running `apt-get update` first: a new
# machine's package lists are empty or stale. Elsewhere, or without root or sudo, stops
# with the exact command to run. WHAT names the need in messages ("a C compiler").
set -euo pipefail
what=$1
shift
command="apt-get update && apt-get install -y $*"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$what is missing: install it with your system's package manager (Debian: '$command')" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "$what is missing: run '$command' as root, then retry" >&2
    exit 1
fi
echo "installing $what ($*) from Debian's packages..." >&2
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
