#!/usr/bin/env bash
# Makes sure this machine can build the crate: a cargo at least as new as Cargo.toml's
# `rust-version`, and a C compiler and libc headers (rustc links through `cc`; `ring`, used
# for TLS, compiles C). Installs the C toolchain from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup_hint="install Rust with rustup (https://rustup.rs: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), then open a new shell"
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: $rustup_hint" >&2
    exit 1
fi
have=$(cargo --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    echo "cargo $have ($(command -v cargo)) is older than this crate's rust-version $need." >&2
    echo "Debian's own cargo (1.65) cannot build edition 2024 at all: $rustup_hint," >&2
    echo "or 'rustup update' if cargo already comes from rustup; ~/.cargo/bin must come first on PATH." >&2
    exit 1
fi
if ! command -v cc >/dev/null 2>&1; then
    bash scripts/apt-install.sh "a C compiler (rustc links with cc)" gcc libc6-dev
fi
command -v cc >/dev/null 2>&1 || { echo "cc still not on PATH" >&2; exit 1; }
